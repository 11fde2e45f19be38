package cri

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/store"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// Stats are answered from memory. A sampler keeps the latest usage sample
// of every running container and pod:
//
//   - when the engine is local and this process sees the host's /proc and
//     cgroup mounts, it reads each container's cgroup files itself, once per
//     statsInterval: the directories come from /proc/<pid>/cgroup of the
//     container's process and the mount table, so any cgroup parent and
//     driver works, cgroup v1 or v2;
//   - for a container whose cgroup it cannot read (remote engine), it keeps
//     one engine stats stream open while the container runs and caches its
//     latest sample (stats_engine.go).
//
// usage_nano_cores is the rate between a container's last two samples.
// Writable layers are measured apart, seldom (stats_layer.go).
const (
	statsInterval = time.Second
	// statsIdleAfter: local sampling pauses when no stats were asked for
	// this long; the next request samples on the spot.
	statsIdleAfter = 2 * time.Minute
	// podKey prefixes the sample of a pod's own cgroup (its cgroup parent).
	podKey = "pod/"
)

// usageSample is one container's (or pod's) usage at one moment.
type usageSample struct {
	at        int64 // Unix ns
	cpu       uint64
	nanoCores uint64
	hasRate   bool
	mem       memUsage
	procs     uint64
	hasProcs  bool
	net       []ifaceUsage // an infra container's: the pod's network
	hasNet    bool
	ext       *cgroupExtra // a container's, while metrics are asked for
}

// withRate sets the CPU rate of s from the previous sample prev.
func (s usageSample) withRate(prev usageSample, ok bool) usageSample {
	if ok && s.at > prev.at && s.cpu >= prev.cpu {
		s.nanoCores = uint64(float64(s.cpu-prev.cpu) * 1e9 / float64(s.at-prev.at))
		s.hasRate = true
	}
	return s
}

type statsCollector struct {
	docker   *dockerapi.Client
	store    *store.Store
	proc     string
	interval time.Duration
	layers   *layerCache

	cgOnce sync.Once
	cg     *cgroupFS // nil: cgroups are not readable here
	// engineOnly makes every container use the engine's stream (tests).
	engineOnly atomic.Bool

	mu       sync.RWMutex
	local    map[string]usageSample  // from cgroup files, replaced each pass
	engine   map[string]engineSample // from engine streams, by their goroutines
	lastPass time.Time

	passMu  sync.Mutex // one sampling pass at a time; guards what follows
	paths   map[string]pathEntry
	streams map[string]*engineStream
	runCtx  context.Context

	asked   atomic.Int64 // Unix ns of the last request
	memOnce sync.Once
	memTot  uint64 // the engine host's memory, to spot "no limit" in engine samples

	// metricsAsked: Unix ns of the last ListPodSandboxMetrics. Until
	// statsIdleAfter after it, passes also read the metrics-only files
	// (cgroupExtra); lastExt says whether the last pass did.
	metricsAsked atomic.Int64
	lastExt      bool // guarded by mu
}

type pathEntry struct {
	pid   int
	paths cgroupPaths
	ok    bool // false: not readable here, use the engine
	fails int  // passes the pid could not be read (it may have just exited)
}

func newStatsCollector(d *dockerapi.Client, st *store.Store) *statsCollector {
	return &statsCollector{docker: d, store: st, proc: "/proc", interval: statsInterval,
		layers: newLayerCache(d, st),
		local:  map[string]usageSample{}, engine: map[string]engineSample{},
		paths: map[string]pathEntry{}, streams: map[string]*engineStream{}}
}

// run samples until ctx ends.
func (c *statsCollector) run(ctx context.Context) {
	c.passMu.Lock()
	c.runCtx = ctx
	c.passMu.Unlock()
	go c.layers.run(ctx)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		idle := time.Since(time.Unix(0, c.asked.Load())) > statsIdleAfter
		c.pass(!idle)
		select {
		case <-ctx.Done():
			c.passMu.Lock()
			for id, s := range c.streams {
				s.cancel()
				delete(c.streams, id)
			}
			c.passMu.Unlock()
			return
		case <-t.C:
		}
	}
}

// fresh makes sure the samples are current before a request is answered:
// the sampler may be idle.
func (c *statsCollector) fresh() {
	c.asked.Store(time.Now().UnixNano())
	if c.age() <= 2*c.interval {
		return
	}
	c.passMu.Lock()
	defer c.passMu.Unlock()
	if c.age() > 2*c.interval { // not done meanwhile by another request
		c.passLocked(true)
	}
}

// freshMetrics is fresh for ListPodSandboxMetrics: the samples must also
// hold what only the metrics read.
func (c *statsCollector) freshMetrics() {
	now := time.Now().UnixNano()
	c.asked.Store(now)
	c.metricsAsked.Store(now)
	ok := func() bool {
		c.mu.RLock()
		defer c.mu.RUnlock()
		return c.lastExt && time.Since(c.lastPass) <= 2*c.interval
	}
	if ok() {
		return
	}
	c.passMu.Lock()
	defer c.passMu.Unlock()
	if !ok() {
		c.passLocked(true)
	}
}

// wantExtra reports whether samples should carry the metrics-only figures.
func (c *statsCollector) wantExtra() bool {
	return time.Since(time.Unix(0, c.metricsAsked.Load())) <= statsIdleAfter
}

// sampleNow samples one running container that has no sample yet (it
// started after the last pass), so that its first stats already carry
// CPU and memory: kubelet reads them right after a start too. Local
// cgroups only: an engine stream gives its first sample in a second.
func (c *statsCollector) sampleNow(id string, pid int) (usageSample, bool) {
	if pid <= 0 || c.engineOnly.Load() {
		return usageSample{}, false
	}
	cg := c.cgroups()
	if cg == nil {
		return usageSample{}, false
	}
	c.passMu.Lock()
	defer c.passMu.Unlock()
	if s, ok := c.sample(id); ok { // sampled meanwhile
		return s, true
	}
	if readable, _ := c.resolve(cg, target{id: id, pid: pid}); !readable {
		return usageSample{}, false
	}
	pe := c.paths[id]
	s, err := sampleCgroup(pe.paths)
	if err != nil {
		return usageSample{}, false
	}
	if c.wantExtra() {
		s.ext, _ = pe.paths.readExtra(c.proc)
	}
	c.mu.Lock()
	c.local[id] = s
	c.mu.Unlock()
	return s, true
}

// sampleOf is sample, or sampleNow for a running container not sampled yet.
func (c *statsCollector) sampleOf(id string, pid int) (usageSample, bool) {
	if s, ok := c.sample(id); ok {
		return s, true
	}
	return c.sampleNow(id, pid)
}

func (c *statsCollector) age() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return time.Since(c.lastPass)
}

func (c *statsCollector) cgroups() *cgroupFS {
	c.cgOnce.Do(func() {
		if !c.docker.IsLocal() {
			return
		}
		fs, err := loadCgroupFS(c.proc)
		if err != nil {
			klog.InfoS("Cannot read cgroups here; container stats come from the engine", "err", err)
			return
		}
		c.cg = fs
	})
	return c.cg
}

// target is one process tree to sample: a running container or a ready
// pod's infra container.
type target struct {
	id       string
	pid      int
	infra    bool
	podCgrp  bool // the pod has a cgroup parent of its own: sample it too
	hostNetw bool
}

func (c *statsCollector) targets() []target {
	var out []target
	c.store.EachSandbox(func(sb sandboxRec) {
		if sb.State != runtime.PodSandboxState_SANDBOX_READY || sb.Pid <= 0 {
			return
		}
		lx := sb.Config.GetLinux()
		out = append(out, target{id: sb.ID, pid: sb.Pid, infra: true, podCgrp: lx.GetCgroupParent() != "",
			hostNetw: lx.GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtime.NamespaceMode_NODE})
	})
	c.store.EachContainer(func(ct containerRec) {
		if ct.State == runtime.ContainerState_CONTAINER_RUNNING && ct.Pid > 0 {
			out = append(out, target{id: ct.ID, pid: ct.Pid})
		}
	})
	return out
}

// pass samples every target once. With readLocal false (idle) it only
// keeps the engine streams in step with what runs.
func (c *statsCollector) pass(readLocal bool) {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	c.passLocked(readLocal)
}

func (c *statsCollector) passLocked(readLocal bool) {
	cg := c.cgroups()
	if c.engineOnly.Load() {
		cg = nil
	}
	c.mu.RLock()
	prev := c.local
	c.mu.RUnlock()
	next := make(map[string]usageSample, len(prev))
	ext := readLocal && c.wantExtra()
	live := map[string]bool{}
	wantStream := map[string]bool{}
	for _, t := range c.targets() {
		live[t.id] = true
		readable, useEngine := false, cg == nil
		if cg != nil {
			readable, useEngine = c.resolve(cg, t)
		}
		if useEngine {
			wantStream[t.id] = true
			continue
		}
		if !readable || !readLocal {
			continue
		}
		pe := c.paths[t.id]
		s, err := sampleCgroup(pe.paths)
		if err != nil {
			continue // it just stopped, most likely
		}
		if ext && !t.infra {
			s.ext, _ = pe.paths.readExtra(c.proc)
		}
		if t.infra && !t.hostNetw {
			if ifs, err := readNetDev(c.proc, t.pid); err == nil {
				s.net, s.hasNet = ifs, true
			}
		}
		p, ok := prev[t.id]
		next[t.id] = s.withRate(p, ok)
		if t.infra && t.podCgrp {
			if ps, err := sampleCgroup(pe.paths.parent()); err == nil {
				p, ok := prev[podKey+t.id]
				next[podKey+t.id] = ps.withRate(p, ok)
			}
		}
	}
	for id := range c.paths {
		if !live[id] {
			delete(c.paths, id)
		}
	}
	c.reconcileStreams(wantStream)
	if readLocal { // idle passes keep the last samples: the next rate spans the pause
		c.mu.Lock()
		c.local = next
		c.lastPass = time.Now()
		c.lastExt = ext
		c.mu.Unlock()
	}
}

// resolve finds (once per process) where a target's cgroup files are. It
// says whether they can be read now, or whether the engine must serve the
// target: its cgroup is not one this host mounts, or its process stays
// invisible here (another pid namespace) for several passes.
func (c *statsCollector) resolve(cg *cgroupFS, t target) (readable, useEngine bool) {
	pe, ok := c.paths[t.id]
	if ok && pe.pid == t.pid && (pe.ok || pe.fails >= 3) {
		return pe.ok, !pe.ok
	}
	if !ok || pe.pid != t.pid {
		pe = pathEntry{pid: t.pid}
	}
	paths, err := cg.paths(t.pid, t.id)
	switch {
	case err == nil:
		pe.paths, pe.ok, pe.fails = paths, true, 0
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		pe.fails++ // the process may just have exited: try again next pass
	default:
		pe.fails = 3
	}
	if !pe.ok && pe.fails >= 3 {
		klog.V(2).InfoS("Cannot read a container's cgroup here; its stats come from the engine", "id", t.id, "err", err)
	}
	c.paths[t.id] = pe
	return pe.ok, !pe.ok && pe.fails >= 3
}

func sampleCgroup(p cgroupPaths) (usageSample, error) {
	at := time.Now().UnixNano()
	u, err := p.read()
	if err != nil {
		return usageSample{}, err
	}
	return usageSample{at: at, cpu: u.cpuNanos, mem: u.memory, procs: u.procs, hasProcs: u.hasProcs}, nil
}

// sample is the latest sample of a container, an infra container (by
// sandbox id) or a pod cgroup (podKey + sandbox id).
func (c *statsCollector) sample(id string) (usageSample, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if s, ok := c.local[id]; ok {
		return s, true
	}
	if e, ok := c.engine[id]; ok && e.has {
		return e.sample, true
	}
	return usageSample{}, false
}

// The CRI messages built from samples.

func cpuUsage(s usageSample) *runtime.CpuUsage {
	u := &runtime.CpuUsage{Timestamp: s.at, UsageCoreNanoSeconds: &runtime.UInt64Value{Value: s.cpu}}
	if s.hasRate {
		u.UsageNanoCores = &runtime.UInt64Value{Value: s.nanoCores}
	}
	return u
}

func memoryUsage(s usageSample) *runtime.MemoryUsage {
	m := &runtime.MemoryUsage{
		Timestamp:       s.at,
		WorkingSetBytes: &runtime.UInt64Value{Value: s.mem.workingSet},
		UsageBytes:      &runtime.UInt64Value{Value: s.mem.usage},
		RssBytes:        &runtime.UInt64Value{Value: s.mem.rss},
		PageFaults:      &runtime.UInt64Value{Value: s.mem.pgfault},
		MajorPageFaults: &runtime.UInt64Value{Value: s.mem.pgmajfault},
	}
	if s.mem.limit > 0 {
		m.AvailableBytes = &runtime.UInt64Value{Value: sub(s.mem.limit, s.mem.workingSet)}
	}
	return m
}

// runStatsAndEvents samples stats until ctx ends, then ends the container
// event streams (the runtime is stopping).
func (s *Server) runStatsAndEvents(ctx context.Context) {
	s.stats.run(ctx)
	s.cevents.close()
}
