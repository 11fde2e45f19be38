package stats

import (
	"context"
	"sort"
	"time"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// The engine's stats streams: for containers whose cgroup files this
// process cannot read (remote engine), one long-lived stream per running
// container, whose latest sample is cached. Never one request per call.

type engineStream struct {
	cancel context.CancelFunc
}

type engineSample struct {
	from   *engineStream
	sample usageSample
	has    bool
}

// reconcileStreams keeps one stream open per container in want and none
// for any other. passMu is held.
func (c *Collector) reconcileStreams(want map[string]bool) {
	for id, s := range c.streams {
		if !want[id] {
			s.cancel()
			delete(c.streams, id)
		}
	}
	if c.runCtx == nil {
		return // not running yet: the first pass of run starts them
	}
	for id := range want {
		if _, ok := c.streams[id]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(c.runCtx)
		s := &engineStream{cancel: cancel}
		c.streams[id] = s
		go c.follow(ctx, id, s)
	}
}

// follow keeps the stream of one container open until ctx ends,
// reconnecting with back-off when the engine ends it early.
func (c *Collector) follow(ctx context.Context, id string, s *engineStream) {
	defer func() {
		c.mu.Lock()
		if e, ok := c.engine[id]; ok && e.from == s {
			delete(c.engine, id)
		}
		c.mu.Unlock()
	}()
	memTotal := c.hostMemory()
	backoff := time.Second
	for ctx.Err() == nil {
		var prev usageSample
		have := false
		err := c.docker.ContainerStatsStream(ctx, id, func(r dockerapi.StatsSample) {
			if r.Read.IsZero() || r.Read.Year() < 1971 {
				return // the engine says nothing runs
			}
			cur := fromEngine(r, memTotal).withRate(prev, have)
			prev, have = cur, true
			c.mu.Lock()
			c.engine[id] = engineSample{from: s, sample: cur, has: true}
			c.mu.Unlock()
			backoff = time.Second
		})
		if ctx.Err() != nil {
			return
		}
		klog.V(3).InfoS("Engine stats stream ended; reopening", "id", id, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// hostMemory is the engine host's memory: the engine reports it as the
// limit of a container that has none.
func (c *Collector) hostMemory() uint64 {
	c.memOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if info, err := c.docker.Info(ctx); err == nil && info.MemTotal > 0 {
			c.memTot = uint64(info.MemTotal)
		}
	})
	return c.memTot
}

// fromEngine converts an engine sample: memory_stats.stats holds cgroup v1
// (total_*) or v2 names.
func fromEngine(r dockerapi.StatsSample, memTotal uint64) usageSample {
	s := usageSample{at: r.Read.UnixNano(), cpu: r.CPUStats.CPUUsage.TotalUsage}
	m := r.MemoryStats
	pick := func(v1, v2 string) uint64 {
		if v, ok := m.Stats[v1]; ok {
			return v
		}
		return m.Stats[v2]
	}
	s.mem = memUsage{usage: m.Usage, rss: pick("total_rss", "anon"), cache: pick("total_cache", "file"),
		pgfault: pick("total_pgfault", "pgfault"), pgmajfault: pick("total_pgmajfault", "pgmajfault")}
	s.mem.workingSet = sub(m.Usage, pick("total_inactive_file", "inactive_file"))
	if m.Limit > 0 && m.Limit < unlimited && (memTotal == 0 || m.Limit < memTotal) {
		s.mem.limit = m.Limit
	}
	if r.PidsStats.Current > 0 {
		s.procs, s.hasProcs = r.PidsStats.Current, true
	}
	if len(r.Networks) > 0 {
		s.hasNet = true
		for name, n := range r.Networks {
			s.net = append(s.net, ifaceUsage{name: name,
				rxBytes: n.RxBytes, rxPackets: n.RxPackets, rxErrors: n.RxErrors, rxDropped: n.RxDropped,
				txBytes: n.TxBytes, txPackets: n.TxPackets, txErrors: n.TxErrors, txDropped: n.TxDropped})
		}
		sort.Slice(s.net, func(i, j int) bool { return s.net[i].name < s.net[j].name })
	}
	return s
}
