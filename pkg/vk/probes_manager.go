package vk

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The prober, in three parts as kubelet's (k8s.io/kubernetes/pkg/kubelet/
// prober): this manager (which probes run, and their results), the workers
// (probes_worker.go: one goroutine per probe per running container
// instance, keyed by container ID and stopped when that container goes)
// and the runner (probes_runner.go: exec, httpGet, tcpSocket, grpc).
// Results are kept here and read by computeStatus and computePodActions;
// a result that changes pokes the pod's worker, which kills a container
// that failed its liveness or startup probe.

type probeKind int

const (
	probeLiveness probeKind = iota
	probeReadiness
	probeStartup
)

func (k probeKind) String() string {
	switch k {
	case probeLiveness:
		return "liveness"
	case probeReadiness:
		return "readiness"
	}
	return "startup"
}

// title is the kind as kubelet's events spell it ("Liveness probe failed").
func (k probeKind) title() string {
	s := k.String()
	return strings.ToUpper(s[:1]) + s[1:]
}

type probeResult int

const (
	resultUnknown probeResult = iota // not probed yet, or the probe could not run
	resultSuccess
	resultFailure
	// resultWarning is a success that the runner has a word about (an
	// http probe's redirect to another host, not followed): the worker
	// reports it as kubelet's ProbeWarning event and counts a success.
	resultWarning
)

func (r probeResult) String() string {
	switch r {
	case resultSuccess:
		return "success"
	case resultFailure:
		return "failure"
	case resultWarning:
		return "warning"
	}
	return "unknown"
}

// probeTarget is the container instance a probe checks.
type probeTarget struct {
	pod       *v1.Pod
	c         *v1.Container
	id        string
	startedAt time.Time
	// host is where httpGet, tcpSocket and grpc probes connect when the
	// probe names no host: the pod's IP, or the node's for hostNetwork.
	host string
}

// probeFunc runs a probe once. An error means it could not run: its
// result is thrown away, as kubelet does.
type probeFunc func(ctx context.Context, kind probeKind, p *v1.Probe, t *probeTarget) (probeResult, string, error)

// containerProbes are the probes of one running container instance.
type containerProbes struct {
	name    string
	cancel  context.CancelFunc
	done    sync.WaitGroup
	results [3]probeResult
	workers []*probeWorker
}

// probeSet holds a pod's probes and their results.
type probeSet struct {
	clock    clock.WithTicker
	check    probeFunc
	onChange func()                                              // wakes the pod's worker
	event    func(t *probeTarget, warn bool, reason, msg string) // may be nil

	// started is when the node started (zero: never spread), and jitter
	// picks a wait in [0, d) (probes_worker.go).
	started time.Time
	jitter  func(d time.Duration) time.Duration

	mu   sync.Mutex
	byID map[string]*containerProbes
	// terminating: the pod is being killed. As kubelet, only readiness
	// probes go on (a container whose preStop or SIGTERM handler makes it
	// unready shows so while it ends); liveness and startup count as
	// succeeded, so that a container is never killed twice.
	terminating bool
}

func newProbeSet(clk clock.WithTicker, check probeFunc, onChange func()) *probeSet {
	return &probeSet{clock: clk, check: check, onChange: onChange, byID: map[string]*containerProbes{},
		jitter: rand.N[time.Duration]}
}

func hasProbes(c *v1.Container) bool {
	return c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil
}

// ensure starts the probes of container instance t.id unless they run.
func (s *probeSet) ensure(ctx context.Context, t *probeTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[t.id]; ok {
		return
	}
	if s.terminating {
		return // a terminating pod starts no probes
	}
	ctx, cancel := context.WithCancel(ctx)
	cp := &containerProbes{name: t.c.Name, cancel: cancel}
	for kind, spec := range map[probeKind]*v1.Probe{probeLiveness: t.c.LivenessProbe, probeReadiness: t.c.ReadinessProbe, probeStartup: t.c.StartupProbe} {
		if spec == nil {
			continue
		}
		pw := &probeWorker{set: s, kind: kind, spec: spec, t: t, trigger: make(chan struct{}, 1)}
		cp.workers = append(cp.workers, pw)
		cp.done.Go(func() { pw.run(ctx) })
	}
	s.byID[t.id] = cp
	klog.V(3).InfoS("Probes started", "pod", klog.KObj(t.pod), "container", t.c.Name, "id", t.id, "probes", len(cp.workers))
}

// retain stops the probes of every container instance not in ids.
func (s *probeSet) retain(ids map[string]bool) {
	s.mu.Lock()
	var stop []*containerProbes
	for id, cp := range s.byID {
		if !ids[id] {
			stop = append(stop, cp)
			delete(s.byID, id)
		}
	}
	s.mu.Unlock()
	for _, cp := range stop {
		cp.cancel()
		cp.done.Wait()
	}
}

// stopAll stops every probe of the pod.
func (s *probeSet) stopAll() { s.retain(nil) }

// terminate keeps only the readiness probes of a pod being killed, and
// records its liveness and startup probes as succeeded (kubelet's
// prober worker, on a pod with a deletion timestamp).
func (s *probeSet) terminate() {
	s.mu.Lock()
	if s.terminating {
		s.mu.Unlock()
		return
	}
	s.terminating = true
	changed := false
	for _, cp := range s.byID {
		for _, k := range []probeKind{probeLiveness, probeStartup} {
			if cp.results[k] != resultSuccess && cp.hasKind(k) {
				cp.results[k] = resultSuccess
				changed = true
			}
		}
		for _, pw := range cp.workers {
			pw.poke() // a readiness probe waiting for the startup probe goes on
		}
	}
	s.mu.Unlock()
	if changed && s.onChange != nil {
		s.onChange()
	}
}

// stopsWhenTerminating: a probe of kind k no longer runs once terminate
// was called.
func (s *probeSet) stopsWhenTerminating(k probeKind) bool {
	if k == probeReadiness {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.terminating
}

func (cp *containerProbes) hasKind(k probeKind) bool {
	for _, pw := range cp.workers {
		if pw.kind == k {
			return true
		}
	}
	return false
}

// set records a probe's new result; a change wakes the pod's worker, and a
// startup probe's success runs the container's other probes at once.
func (s *probeSet) set(id string, kind probeKind, r probeResult) {
	s.mu.Lock()
	cp, ok := s.byID[id]
	// A liveness or startup result that was in flight when the pod began
	// terminating is thrown away.
	changed := ok && cp.results[kind] != r && !(s.terminating && kind != probeReadiness)
	if changed {
		cp.results[kind] = r
		if kind == probeStartup && r == resultSuccess {
			for _, pw := range cp.workers {
				pw.poke()
			}
		}
	}
	s.mu.Unlock()
	if changed && s.onChange != nil {
		s.onChange()
	}
}

func (s *probeSet) result(id string, kind probeKind) probeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cp, ok := s.byID[id]; ok {
		return cp.results[kind]
	}
	return resultUnknown
}

// state is whether running container c (instance id) has started and is
// ready, as kubelet's prober manager sets them: with no startup probe it
// has started once running; with no readiness probe it is ready once
// started; a probe that has not succeeded yet counts as not.
func (s *probeSet) state(c *v1.Container, id string) (started, ready bool) {
	started = c.StartupProbe == nil || s.result(id, probeStartup) == resultSuccess
	if !started {
		return false, false
	}
	return true, c.ReadinessProbe == nil || s.result(id, probeReadiness) == resultSuccess
}

// failed is the probe (liveness or startup) whose failure means container
// instance id must be killed, if any.
func (s *probeSet) failed(id string) (probeKind, bool) {
	for _, k := range []probeKind{probeStartup, probeLiveness} {
		if s.result(id, k) == resultFailure {
			return k, true
		}
	}
	return 0, false
}

// probeKillMessage is why container c, which failed its probe, is
// killed, as kubelet words it (a sidecar always restarts, unsaid).
func probeKillMessage(pod *v1.Pod, c *v1.Container, init bool, kind probeKind) string {
	if init && isSidecar(c) {
		return fmt.Sprintf("Init container %s failed %s probe", c.Name, kind)
	}
	msg := fmt.Sprintf("Container %s failed %s probe", c.Name, kind)
	if restartsAfterKill(c, &pod.Spec) {
		msg += ", will be restarted"
	}
	return msg
}

// probeGrace is the grace period of a kill for a failed probe: the probe's
// own terminationGracePeriodSeconds when set, else the pod's.
func probeGrace(pod *v1.Pod, p *v1.Probe) int64 {
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		return *p.TerminationGracePeriodSeconds
	}
	return podGrace(pod)
}

func podGrace(pod *v1.Pod) int64 {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return 30
}

// syncProbes runs the probes of the pod's running app containers and
// sidecars (regular init containers have none) and stops those of
// containers that are gone or stopped.
func (w *podWorker) syncProbes(ctx context.Context, pod *v1.Pod, obs *observation) {
	keep := map[string]bool{}
	sb := obs.sandboxInfo()
	host := ""
	switch {
	case pod.Spec.HostNetwork && len(w.p.cfg.NodeIPs) > 0:
		host = w.p.cfg.NodeIPs[0]
	case sb != nil && len(sb.ips) > 0:
		host = sb.ips[0]
	}
	probed := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			probed = append(probed, &pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		probed = append(probed, &pod.Spec.Containers[i])
	}
	active := w.lifecycle() == podActive
	for _, c := range probed {
		cur := obs.current(c.Name)
		if !hasProbes(c) || cur == nil || cur.state != runtimeapi.ContainerState_CONTAINER_RUNNING || !active {
			continue
		}
		keep[cur.id] = true
		startedAt := cur.startedAt
		if startedAt.IsZero() {
			startedAt = cur.createdAt
		}
		if now := w.p.clock.Now(); startedAt.After(now) {
			startedAt = now // the runtime's clock is ahead: wait no longer than asked
		}
		w.probes.ensure(ctx, &probeTarget{pod: pod, c: c, id: cur.id, startedAt: startedAt, host: host})
	}
	w.probes.retain(keep)
}
