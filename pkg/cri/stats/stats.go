// Package stats keeps the latest usage sample of every running container
// and pod, and builds the CRI stats and metrics messages from them, so that
// the stats RPCs answer from memory. A sampler keeps those samples:
//
//   - when the engine is local and this process sees the host's /proc and
//     cgroup mounts, it reads each container's cgroup files itself, once per
//     Options.Interval: the directories come from /proc/<pid>/cgroup of the
//     container's process and the mount table, so any cgroup parent and
//     driver works, cgroup v1 or v2;
//   - for a container whose cgroup it cannot read (remote engine), it keeps
//     one engine stats stream open while the container runs and caches its
//     latest sample (engine.go).
//
// usage_nano_cores is the rate between a container's last two samples.
// Writable layers are measured apart, seldom (layer.go).
//
// The runtime wires it with New (an Engine and a Source of what runs),
// calls Run once, and in its handlers Fresh (or FreshMetrics) then
// ContainerStats, PodStats or PodMetrics.
package stats

import (
	"context"
	"errors"
	"io/fs"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/system"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

const (
	// DefaultInterval is how often running containers are sampled.
	DefaultInterval = time.Second
	// statsIdleAfter: local sampling pauses when no stats were asked for
	// this long; the next request samples on the spot.
	statsIdleAfter = 2 * time.Minute
	// podKey prefixes the sample of a pod's own cgroup (its cgroup parent).
	podKey = "pod/"
)

// Engine is what the sampler asks of the container engine
// (*dockerapi.Client).
type Engine interface {
	// IsLocal: the engine runs on this host, so its cgroups and its
	// containers' writable layers may be readable here.
	IsLocal() bool
	Info(ctx context.Context) (system.Info, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerStatsStream(ctx context.Context, id string, fn func(dockerapi.StatsSample)) error
	ContainerSizes(ctx context.Context, labels ...string) (map[string]int64, error)
	ContainerSize(ctx context.Context, id string) (int64, error)
}

// Source tells the sampler what runs (the runtime's store).
type Source interface {
	// Targets are the running containers and the ready pods' infra
	// containers.
	Targets() []Target
	// ContainerIDs are every container's, running or not: their writable
	// layers are measured.
	ContainerIDs() []string
}

// Target is one process tree to sample: a running container or a ready
// pod's infra container (Infra, by its sandbox id).
type Target struct {
	ID    string
	Pid   int
	Infra bool
	// PodCgroup: the pod has a cgroup parent of its own; it is sampled
	// too (its infra container's cgroup's parent).
	PodCgroup bool
	// HostNetwork: the pod shares the host's network; no pod network is
	// read.
	HostNetwork bool
}

// Options tune a Collector; the zero value is the defaults.
type Options struct {
	// Proc is where the host's /proc is seen ("/proc").
	Proc string
	// Interval between two sampling passes (DefaultInterval).
	Interval time.Duration
}

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

// Collector samples usage and answers the stats and metrics RPCs from
// the samples.
type Collector struct {
	docker   Engine
	src      Source
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

// New makes a Collector of what src lists, on engine d. Call Run to sample.
func New(d Engine, src Source, o Options) *Collector {
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	return &Collector{docker: d, src: src, proc: o.Proc, interval: o.Interval,
		layers: newLayerCache(d, src),
		local:  map[string]usageSample{}, engine: map[string]engineSample{},
		paths: map[string]pathEntry{}, streams: map[string]*engineStream{}}
}

// Run samples until ctx ends.
func (c *Collector) Run(ctx context.Context) {
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

// Fresh makes sure the samples are current before a request is answered:
// the sampler may be idle.
func (c *Collector) Fresh() {
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

// FreshMetrics is Fresh for ListPodSandboxMetrics: the samples must also
// hold what only the metrics read.
func (c *Collector) FreshMetrics() {
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
func (c *Collector) wantExtra() bool {
	return time.Since(time.Unix(0, c.metricsAsked.Load())) <= statsIdleAfter
}

// sampleNow samples one running container that has no sample yet (it
// started after the last pass), so that its first stats already carry
// CPU and memory: kubelet reads them right after a start too. Local
// cgroups only: an engine stream gives its first sample in a second.
func (c *Collector) sampleNow(id string, pid int) (usageSample, bool) {
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
	if readable, _ := c.resolve(cg, Target{ID: id, Pid: pid}); !readable {
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
func (c *Collector) sampleOf(id string, pid int) (usageSample, bool) {
	if s, ok := c.sample(id); ok {
		return s, true
	}
	return c.sampleNow(id, pid)
}

func (c *Collector) age() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return time.Since(c.lastPass)
}

func (c *Collector) cgroups() *cgroupFS {
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

// pass samples every target once. With readLocal false (idle) it only
// keeps the engine streams in step with what runs.
func (c *Collector) pass(readLocal bool) {
	c.passMu.Lock()
	defer c.passMu.Unlock()
	c.passLocked(readLocal)
}

func (c *Collector) passLocked(readLocal bool) {
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
	for _, t := range c.src.Targets() {
		live[t.ID] = true
		readable, useEngine := false, cg == nil
		if cg != nil {
			readable, useEngine = c.resolve(cg, t)
		}
		if useEngine {
			wantStream[t.ID] = true
			continue
		}
		if !readable || !readLocal {
			continue
		}
		pe := c.paths[t.ID]
		s, err := sampleCgroup(pe.paths)
		if err != nil {
			continue // it just stopped, most likely
		}
		if ext && !t.Infra {
			s.ext, _ = pe.paths.readExtra(c.proc)
		}
		if t.Infra && !t.HostNetwork {
			if ifs, err := readNetDev(c.proc, t.Pid); err == nil {
				s.net, s.hasNet = ifs, true
			}
		}
		p, ok := prev[t.ID]
		next[t.ID] = s.withRate(p, ok)
		if t.Infra && t.PodCgroup {
			if ps, err := sampleCgroup(pe.paths.parent()); err == nil {
				p, ok := prev[podKey+t.ID]
				next[podKey+t.ID] = ps.withRate(p, ok)
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
func (c *Collector) resolve(cg *cgroupFS, t Target) (readable, useEngine bool) {
	pe, ok := c.paths[t.ID]
	if ok && pe.pid == t.Pid && (pe.ok || pe.fails >= 3) {
		return pe.ok, !pe.ok
	}
	if !ok || pe.pid != t.Pid {
		pe = pathEntry{pid: t.Pid}
	}
	paths, err := cg.paths(t.Pid, t.ID)
	switch {
	case err == nil:
		pe.paths, pe.ok, pe.fails = paths, true, 0
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		pe.fails++ // the process may just have exited: try again next pass
	default:
		pe.fails = 3
	}
	if !pe.ok && pe.fails >= 3 {
		klog.V(2).InfoS("Cannot read a container's cgroup here; its stats come from the engine", "id", t.ID, "err", err)
	}
	c.paths[t.ID] = pe
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
func (c *Collector) sample(id string) (usageSample, bool) {
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

// The test hooks of the runtime's integration tests.

// UseEngineOnly makes every container's sample come from the engine's
// streams and every writable layer's size from the engine's list, as with
// a remote engine.
func (c *Collector) UseEngineOnly() {
	c.engineOnly.Store(true)
	c.layers.engineOnly.Store(true)
}

// SetLayerMaxAge changes how often writable layers are measured again.
func (c *Collector) SetLayerMaxAge(d time.Duration) { c.layers.maxAge.Store(int64(d)) }

// Pass runs one sampling pass now.
func (c *Collector) Pass() { c.pass(true) }
