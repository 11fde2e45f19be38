package vk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	remote "k8s.io/cri-client/pkg"
	clocktesting "k8s.io/utils/clock/testing"
	utilexec "k8s.io/utils/exec"
)

// script is a probeFunc that answers from a list, one answer per call,
// and counts the calls by kind.
type script struct {
	mu      sync.Mutex
	answers []probeResult // resultUnknown: the probe errors
	calls   map[probeKind]int
}

func (s *script) check(_ context.Context, kind probeKind, _ *v1.Probe, _ *probeTarget) (probeResult, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = map[probeKind]int{}
	}
	s.calls[kind]++
	if len(s.answers) == 0 {
		return resultUnknown, "", errors.New("no answer scripted")
	}
	r := s.answers[0]
	s.answers = s.answers[1:]
	if r == resultUnknown {
		return r, "", errors.New("scripted error")
	}
	return r, "out", nil
}

func (s *script) n(kind probeKind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[kind]
}

// probeFixture is one container instance with the given probes, and its
// probeSet with a scripted check.
type probeFixture struct {
	clk     *clocktesting.FakeClock
	s       *script
	set     *probeSet
	t       *probeTarget
	changes int
	workers map[probeKind]*probeWorker
}

func newProbeFixture(c *v1.Container) *probeFixture {
	f := &probeFixture{clk: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), s: &script{}, workers: map[probeKind]*probeWorker{}}
	f.set = newProbeSet(f.clk, f.s.check, func() { f.changes++ })
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: v1.PodSpec{Containers: []v1.Container{*c}}}
	f.t = &probeTarget{pod: pod, c: &pod.Spec.Containers[0], id: "cid", startedAt: f.clk.Now(), host: "127.0.0.1"}
	// The workers are driven by hand (step), not by their goroutines.
	cp := &containerProbes{name: c.Name, cancel: func() {}}
	for kind, spec := range map[probeKind]*v1.Probe{probeLiveness: c.LivenessProbe, probeReadiness: c.ReadinessProbe, probeStartup: c.StartupProbe} {
		if spec != nil {
			pw := &probeWorker{set: f.set, kind: kind, spec: spec, t: f.t, trigger: make(chan struct{}, 1)}
			cp.workers = append(cp.workers, pw)
			f.workers[kind] = pw
		}
	}
	f.set.byID["cid"] = cp
	return f
}

func execProbe(success, failure int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: success, FailureThreshold: failure}
}

// waitCalls waits (in real time: the worker's goroutine runs) until
// kind's probe has been called want times.
func (f *probeFixture) waitCalls(t *testing.T, kind probeKind, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for f.s.n(kind) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s probes, want %d", f.s.n(kind), kind, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// steps runs kind's worker once per answer.
func (f *probeFixture) steps(kind probeKind, answers ...probeResult) {
	f.s.mu.Lock()
	f.s.answers = append(f.s.answers, answers...)
	f.s.mu.Unlock()
	for range answers {
		f.workers[kind].step(context.Background())
	}
	f.s.mu.Lock()
	f.s.answers = nil // those of steps that did not probe
	f.s.mu.Unlock()
}

func TestProbeThresholds(t *testing.T) {
	S, F, E := resultSuccess, resultFailure, resultUnknown
	f := newProbeFixture(&v1.Container{Name: "c", ReadinessProbe: execProbe(2, 3), LivenessProbe: execProbe(1, 2)})
	check := func(kind probeKind, want probeResult) {
		t.Helper()
		if got := f.set.result("cid", kind); got != want {
			t.Fatalf("%s result %s, want %s", kind, got, want)
		}
	}
	var counted []string
	old := probeResultHook
	probeResultHook = func(kind, result string) { counted = append(counted, kind+"/"+result) }
	t.Cleanup(func() { probeResultHook = old })

	// Readiness: two successes make it ready, three failures unready.
	f.steps(probeReadiness, S)
	check(probeReadiness, resultUnknown)
	f.steps(probeReadiness, S)
	check(probeReadiness, S)
	f.steps(probeReadiness, F, F)
	check(probeReadiness, S)
	f.steps(probeReadiness, E) // an error is thrown away and breaks no streak
	f.steps(probeReadiness, F)
	check(probeReadiness, F)
	f.steps(probeReadiness, S, F, S)
	check(probeReadiness, F)
	f.steps(probeReadiness, S)
	check(probeReadiness, S)
	if _, ready := f.set.state(f.t.c, "cid"); !ready {
		t.Error("not ready after readiness succeeded")
	}

	// Liveness: the second failure in a row fails it, and probing stops
	// until the container is replaced.
	f.steps(probeLiveness, F, S, F)
	check(probeLiveness, S)
	if _, failed := f.set.failed("cid"); failed {
		t.Fatal("failed before the threshold")
	}
	before := f.changes
	f.steps(probeLiveness, F)
	check(probeLiveness, F)
	if kind, failed := f.set.failed("cid"); !failed || kind != probeLiveness {
		t.Fatalf("failed() = %v, %v after liveness failed", kind, failed)
	}
	if f.changes != before+1 {
		t.Errorf("%d changes reported for the liveness failure, want 1", f.changes-before)
	}
	n := f.s.n(probeLiveness)
	f.steps(probeLiveness, S, S)
	if f.s.n(probeLiveness) != n {
		t.Error("liveness probed again after it failed")
	}
	if !slices.Contains(counted, "readiness/unknown") || !slices.Contains(counted, "liveness/failure") || !slices.Contains(counted, "readiness/success") {
		t.Errorf("results passed to the metrics hook: %v", counted)
	}
}

// TestProbeTerminating: once the pod terminates, its liveness and startup
// probes count as succeeded and probe no more, while its readiness probe
// goes on and can still turn the container unready.
func TestProbeTerminating(t *testing.T) {
	S, F := resultSuccess, resultFailure
	f := newProbeFixture(&v1.Container{Name: "c", ReadinessProbe: execProbe(1, 1), LivenessProbe: execProbe(1, 1), StartupProbe: execProbe(1, 1)})
	f.steps(probeStartup, S)
	f.steps(probeReadiness, S)
	f.steps(probeLiveness, F)
	if _, failed := f.set.failed("cid"); !failed {
		t.Fatal("liveness not failed before the pod terminates")
	}
	before := f.changes
	f.set.terminate()
	if _, failed := f.set.failed("cid"); failed {
		t.Error("a terminating pod's container still failed its liveness probe")
	}
	if f.changes != before+1 {
		t.Errorf("%d changes reported when terminating, want 1", f.changes-before)
	}
	n := f.s.n(probeLiveness)
	f.workers[probeLiveness].onHold = false
	f.steps(probeLiveness, F, F)
	if f.s.n(probeLiveness) != n || f.set.result("cid", probeLiveness) != S {
		t.Errorf("liveness probed on a terminating pod (%d more calls, result %s)", f.s.n(probeLiveness)-n, f.set.result("cid", probeLiveness))
	}
	// A liveness probe that was under way when the pod began terminating
	// says nothing: no result, no Unhealthy event.
	g := newProbeFixture(&v1.Container{Name: "c", LivenessProbe: execProbe(1, 1)})
	var said []string
	g.set.event = func(_ *probeTarget, _ bool, reason, msg string) { said = append(said, reason+" "+msg) }
	g.s.answers = []probeResult{F}
	g.set.check = func(ctx context.Context, kind probeKind, p *v1.Probe, t *probeTarget) (probeResult, string, error) {
		g.set.terminate() // the deletion comes while the probe runs
		return g.s.check(ctx, kind, p, t)
	}
	g.workers[probeLiveness].step(context.Background())
	if len(said) != 0 || g.set.result("cid", probeLiveness) == F {
		t.Errorf("a liveness failure seen as the pod began terminating: events %q, result %s", said, g.set.result("cid", probeLiveness))
	}
	// A liveness failure that was in flight is thrown away.
	f.set.set("cid", probeLiveness, F)
	if f.set.result("cid", probeLiveness) != S {
		t.Error("a liveness failure recorded after the pod began terminating")
	}
	f.steps(probeReadiness, F)
	if _, ready := f.set.state(f.t.c, "cid"); ready {
		t.Error("readiness not probed on a terminating pod")
	}
	f.set.ensure(context.Background(), &probeTarget{pod: f.t.pod, c: f.t.c, id: "other", startedAt: f.clk.Now()})
	if _, ok := f.set.byID["other"]; ok {
		t.Error("probes started on a terminating pod")
	}
}

// TestProbeWarning: a warning (a redirect not followed) is a success
// that is reported as kubelet's ProbeWarning event; it neither fails the
// container nor reports Unhealthy.
func TestProbeWarning(t *testing.T) {
	f := newProbeFixture(&v1.Container{Name: "c", LivenessProbe: execProbe(1, 1)})
	var evs []string
	f.set.event = func(_ *probeTarget, warn bool, reason, msg string) {
		evs = append(evs, fmt.Sprintf("%v %s %s", warn, reason, msg))
	}
	f.steps(probeLiveness, resultWarning, resultWarning)
	if got := f.set.result("cid", probeLiveness); got != resultSuccess {
		t.Fatalf("liveness result %s after warnings, want success", got)
	}
	if _, failed := f.set.failed("cid"); failed {
		t.Fatal("a warning failed the container")
	}
	want := []string{"true ProbeWarning Liveness probe warning: out", "true ProbeWarning Liveness probe warning: out"}
	if !slices.Equal(evs, want) {
		t.Errorf("events %q, want %q", evs, want)
	}
}

// TestProbeResultsCounted checks that probe results reach the metrics.
func TestProbeResultsCounted(t *testing.T) {
	count := func() float64 {
		m := &dto.Metric{}
		if err := probeResults.WithLabelValues(ProbeReadiness, ProbeFailure).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := count()
	f := newProbeFixture(&v1.Container{Name: "c", ReadinessProbe: execProbe(1, 1)})
	f.steps(probeReadiness, resultFailure, resultFailure)
	if got := count() - before; got != 2 {
		t.Errorf("vkcri_probe_results_total{probe_type=readiness,result=failure} rose by %v, want 2", got)
	}
}

func TestProbeInitialDelay(t *testing.T) {
	p := execProbe(1, 1)
	p.InitialDelaySeconds = 5
	f := newProbeFixture(&v1.Container{Name: "c", ReadinessProbe: p})
	f.steps(probeReadiness, resultSuccess)
	if f.s.n(probeReadiness) != 0 {
		t.Fatal("probed within the initial delay")
	}
	f.clk.Step(5 * time.Second)
	f.steps(probeReadiness, resultSuccess)
	if f.s.n(probeReadiness) != 1 || f.set.result("cid", probeReadiness) != resultSuccess {
		t.Fatalf("after the initial delay: %d probes, result %s", f.s.n(probeReadiness), f.set.result("cid", probeReadiness))
	}
}

func TestProbeStartupGates(t *testing.T) {
	c := &v1.Container{Name: "c", StartupProbe: execProbe(1, 3), ReadinessProbe: execProbe(1, 1), LivenessProbe: execProbe(1, 1)}
	f := newProbeFixture(c)
	f.steps(probeReadiness, resultSuccess)
	f.steps(probeLiveness, resultFailure)
	if f.s.n(probeReadiness)+f.s.n(probeLiveness) != 0 {
		t.Fatal("readiness or liveness probed before the startup probe succeeded")
	}
	if started, ready := f.set.state(f.t.c, "cid"); started || ready {
		t.Fatalf("before startup: started %v ready %v", started, ready)
	}
	f.steps(probeStartup, resultFailure, resultFailure, resultSuccess)
	if started, ready := f.set.state(f.t.c, "cid"); !started || ready {
		t.Fatalf("after startup: started %v ready %v, want started, not ready", started, ready)
	}
	select {
	case <-f.workers[probeReadiness].trigger:
	default:
		t.Error("the startup probe's success did not trigger the readiness probe")
	}
	n := f.s.n(probeStartup)
	f.steps(probeStartup, resultFailure)
	if f.s.n(probeStartup) != n {
		t.Error("startup probed again after it succeeded")
	}
	f.steps(probeReadiness, resultSuccess)
	if started, ready := f.set.state(f.t.c, "cid"); !started || !ready {
		t.Fatalf("after readiness: started %v ready %v", started, ready)
	}

	// A startup probe that fails its threshold kills, like liveness.
	g := newProbeFixture(c)
	g.steps(probeStartup, resultFailure, resultFailure, resultFailure)
	if kind, failed := g.set.failed("cid"); !failed || kind != probeStartup {
		t.Fatalf("failed() = %v, %v after the startup probe failed", kind, failed)
	}
}

// TestProbeRun runs a probe's goroutine on a fake clock: the first probe
// once the initial delay is over, then one a period.
func TestProbeRun(t *testing.T) {
	p := execProbe(1, 1)
	p.InitialDelaySeconds, p.PeriodSeconds = 3, 2
	f := newProbeFixture(&v1.Container{Name: "c", ReadinessProbe: p})
	f.s.answers = []probeResult{resultSuccess, resultSuccess, resultSuccess}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.workers[probeReadiness].run(ctx); close(done) }()
	waitCalls := func(want int) { t.Helper(); f.waitCalls(t, probeReadiness, want) }
	for !f.clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	if f.s.n(probeReadiness) != 0 {
		t.Fatal("probed before the initial delay")
	}
	f.clk.Step(3 * time.Second)
	waitCalls(1)
	for !f.clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	f.clk.Step(2 * time.Second)
	waitCalls(2)
	cancel()
	<-done
}

// TestProbeSpreadAfterStart: within a period of the node's start, a
// running container's probe first waits its jitter (as kubelet's prober
// after a restart), then probes every period; later it probes at once.
func TestProbeSpreadAfterStart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sinceStart time.Duration
		first      time.Duration // fake time until the first probe
	}{
		{"just started", time.Second, 7 * time.Second},
		{"started long ago", time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := execProbe(1, 1)
			p.PeriodSeconds = 10
			f := newProbeFixture(&v1.Container{Name: "c", ReadinessProbe: p})
			f.set.started = f.clk.Now().Add(-tc.sinceStart)
			var asked []time.Duration
			f.set.jitter = func(d time.Duration) time.Duration { asked = append(asked, d); return 7 * time.Second }
			f.s.answers = []probeResult{resultSuccess, resultSuccess}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { f.workers[probeReadiness].run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			waitCalls := func(want int) { t.Helper(); f.waitCalls(t, probeReadiness, want) }
			if tc.first > 0 {
				for !f.clk.HasWaiters() {
					time.Sleep(time.Millisecond)
				}
				if n := f.s.n(probeReadiness); n != 0 {
					t.Fatalf("%d probes before the jitter", n)
				}
				f.clk.Step(tc.first)
			}
			waitCalls(1)
			if tc.first > 0 && (len(asked) != 1 || asked[0] != 10*time.Second) {
				t.Errorf("jitter asked for %v, want one wait within the 10 s period", asked)
			}
			if tc.first == 0 && len(asked) != 0 {
				t.Errorf("jitter asked for %v long after the start", asked)
			}
			for !f.clk.HasWaiters() {
				time.Sleep(time.Millisecond)
			}
			f.clk.Step(10 * time.Second)
			waitCalls(2)
		})
	}
}

func TestProbeStatusMapping(t *testing.T) {
	pod := specPod(v1.RestartPolicyAlways, nil, "a", "b")
	pod.Spec.Containers[0].ReadinessProbe = execProbe(1, 1)
	pod.Spec.Containers[1].StartupProbe = execProbe(1, 1)
	results := map[string][2]bool{}
	in := statusInput{
		pod: pod, runtimeName: "fake", sandbox: &sandboxInfo{id: "sb", ready: true, ips: []string{"10.1.0.2"}},
		containers: map[string][]*criContainer{"a": {running("a", "sb", 0)}, "b": {running("b", "sb", 0)}},
		probe: func(c *v1.Container, id string) (bool, bool) {
			r := results[c.Name]
			return r[0], r[1]
		},
		now: time.Now(),
	}
	st := computeStatus(in)
	a, b := containerStatus(st, "a"), containerStatus(st, "b")
	if a.Ready || b.Ready || *b.Started || st.Phase != v1.PodRunning {
		t.Fatalf("before the probes: a ready %v, b ready %v started %v, phase %s", a.Ready, b.Ready, *b.Started, st.Phase)
	}
	if condition(st, v1.PodReady) != v1.ConditionFalse || condition(st, v1.ContainersReady) != v1.ConditionFalse {
		t.Fatal("pod Ready before its containers")
	}
	results["a"] = [2]bool{true, true}
	results["b"] = [2]bool{true, true}
	st = computeStatus(in)
	if !containerStatus(st, "a").Ready || !*containerStatus(st, "b").Started || condition(st, v1.PodReady) != v1.ConditionTrue || condition(st, v1.ContainersReady) != v1.ConditionTrue {
		t.Fatalf("after the probes: %+v", st)
	}
}

// probeEnv is a worker on the fake runtime whose probes never run by
// themselves: the tests set their results.
func probeEnv(t *testing.T, pod *v1.Pod) (*testEnv, *podWorker, *record.FakeRecorder) {
	e := newTestEnv(t)
	rec := record.NewFakeRecorder(100)
	e.p.recorder = rec
	w := newPodWorker(e.p, pod)
	w.probes.check = func(context.Context, probeKind, *v1.Probe, *probeTarget) (probeResult, string, error) {
		return resultUnknown, "", errors.New("not run in this test")
	}
	t.Cleanup(w.probes.stopAll)
	return e, w, rec
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestWorkerProbes checks the worker's side: probes start with their
// container, readiness drives Ready, a liveness failure kills the
// container, which is restarted with the reason in its last state, and
// the old instance's probes stop.
func TestWorkerProbes(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers[0].LivenessProbe = execProbe(1, 1)
	pod.Spec.Containers[1].ReadinessProbe = execProbe(1, 1)
	e, w, rec := probeEnv(t, pod)
	w.pass(context.Background())
	a, b := e.container(t, "a"), e.container(t, "b")
	if len(w.probes.byID) != 2 {
		t.Fatalf("%d containers probed, want 2", len(w.probes.byID))
	}
	st := e.last(t).Status
	if containerStatus(st, "b").Ready || !containerStatus(st, "a").Ready || condition(st, v1.PodReady) != v1.ConditionFalse {
		t.Fatalf("before readiness: %+v", st)
	}
	w.probes.set(b.Id, probeReadiness, resultSuccess)
	if !woken(w, time.Second) {
		t.Fatal("a readiness change did not wake the worker")
	}
	w.pass(context.Background())
	if st := e.last(t).Status; condition(st, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("after readiness: %+v", st)
	}

	w.probes.set(a.Id, probeLiveness, resultFailure)
	w.pass(context.Background())
	if !slices.Contains(e.rt.Called, "StopContainer") {
		t.Fatal("the container that failed liveness was not stopped")
	}
	now := e.container(t, "a")
	if now.Metadata.Attempt != 1 || now.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the liveness failure: attempt %d state %v", now.Metadata.Attempt, now.State)
	}
	cs := containerStatus(e.last(t).Status, "a")
	if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil ||
		cs.LastTerminationState.Terminated.Message != "Container a failed liveness probe, will be restarted" {
		t.Fatalf("restarted container's status: %+v", cs)
	}
	if _, ok := w.probes.byID[a.Id]; ok {
		t.Error("the killed instance is still probed")
	}
	if _, ok := w.probes.byID[now.Id]; !ok {
		t.Error("the new instance is not probed")
	}
	if ev := events(rec); !slices.ContainsFunc(ev, func(s string) bool { return strings.HasPrefix(s, "Normal Killing Container a failed liveness probe") }) {
		t.Errorf("events %q", ev)
	}

	// Deleting the pod stops every probe once its containers are stopped.
	w.delete(1)
	w.pass(context.Background())
	if len(w.probes.byID) != 0 {
		t.Errorf("%d containers still probed after delete", len(w.probes.byID))
	}
}

func TestWorkerPostStartFails(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers = pod.Spec.Containers[1:]
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
	e, w, rec := probeEnv(t, pod)
	e.rt.InjectError("ExecSync", utilexec.CodeExitError{Err: errors.New("exit 1"), Code: 1})
	w.pass(context.Background())
	calls := slices.Clone(e.rt.Called)
	i, j := slices.Index(calls, "ExecSync"), slices.Index(calls, "StopContainer")
	if i < 0 || j < i {
		t.Fatalf("calls %v: want the hook, then the stop", calls)
	}
	if ev := events(rec); !slices.Contains(ev, "Warning FailedPostStartHook PostStartHook failed") {
		t.Errorf("events %q", ev)
	}
	// The next pass restarted it at once; its hook now succeeded.
	c := e.container(t, "b")
	if c.Metadata.Attempt != 1 || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the failed hook: attempt %d state %v", c.Metadata.Attempt, c.State)
	}
}

func TestWorkerPostStartFailsWaits(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers = pod.Spec.Containers[1:]
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"false"}}}}
	e, w, _ := probeEnv(t, pod)
	e.rt.InjectError("ExecSync", utilexec.CodeExitError{Err: errors.New("hook said no"), Code: 1})
	w.pass(context.Background())
	cs := containerStatus(e.last(t).Status, "b")
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonPostStartHookError || !strings.Contains(cs.State.Waiting.Message, "hook said no") {
		t.Fatalf("status %+v", cs.State)
	}
}

func TestWorkerPreStopOnDelete(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo bye"}}}}
	e, w, _ := probeEnv(t, pod)
	w.pass(context.Background())
	e.rt.Lock()
	e.rt.Called = nil
	e.rt.Unlock()
	w.delete(5)
	if done := w.pass(context.Background()); !done {
		t.Fatal("delete did not finish")
	}
	calls := slices.Clone(e.rt.Called)
	if n := strings.Count(strings.Join(calls, ","), "ExecSync"); n != 1 {
		t.Fatalf("calls %v: want one preStop hook", calls)
	}
	if i, j := slices.Index(calls, "ExecSync"), slices.Index(calls, "StopContainer"); i < 0 || j < 0 || i > slices.Index(calls[j+1:], "StopContainer")+j+1 {
		t.Fatalf("calls %v", calls)
	}
}

func TestExecProbeResults(t *testing.T) {
	rt := critesting.NewFakeRuntimeService()
	h := newHandlerRunner(&Runtime{RuntimeService: rt})
	cases := []struct {
		err     error
		want    probeResult
		wantErr bool
	}{
		{nil, resultSuccess, false},
		{utilexec.CodeExitError{Err: errors.New("exit 1"), Code: 1}, resultFailure, false},
		{fmt.Errorf("%w: after 1s", remote.ErrCommandTimedOut), resultFailure, false},
		{errors.New("runtime away"), resultUnknown, true},
	}
	for _, c := range cases {
		if c.err != nil {
			rt.InjectError("ExecSync", c.err)
		}
		r, _, err := h.exec(context.Background(), "cid", []string{"x"}, time.Second)
		if r != c.want || (err != nil) != c.wantErr {
			t.Errorf("ExecSync error %v: result %s err %v, want %s", c.err, r, err, c.want)
		}
	}
}

func TestNetworkProbes(t *testing.T) {
	var gotUA, gotHeader string
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		gotUA, gotHeader = r.UserAgent(), r.Header.Get("X-Probe")
		fmt.Fprint(w, "fine")
	})
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) })
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://0.0.0.0/", http.StatusFound)
	})
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok", http.StatusFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(gl) }()
	defer gs.Stop()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	c := &v1.Container{Name: "c", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	target := &probeTarget{c: c, id: "cid", host: "127.0.0.1"}
	h := newHandlerRunner(&Runtime{RuntimeService: critesting.NewFakeRuntimeService()})
	httpProbe := func(path string, port intstr.IntOrString) *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: port,
			HTTPHeaders: []v1.HTTPHeader{{Name: "X-Probe", Value: "yes"}}}}}
	}
	svc := func(s string) *string { return &s }
	cases := []struct {
		name string
		p    *v1.Probe
		want probeResult
	}{
		{"http by port name", httpProbe("/ok", intstr.FromString("web")), resultSuccess},
		{"http 503", httpProbe("/bad", intstr.FromInt32(int32(port))), resultFailure},
		{"http redirect elsewhere", httpProbe("/away", intstr.FromInt32(int32(port))), resultWarning},
		{"http redirect on the same host", httpProbe("/here", intstr.FromInt32(int32(port))), resultSuccess},
		{"http refused", httpProbe("/", intstr.FromInt32(int32(closedPort))), resultFailure},
		{"tcp open", &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("web")}}}, resultSuccess},
		{"tcp closed", &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(closedPort))}}}, resultFailure},
		{"grpc serving", &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(gl.Addr().(*net.TCPAddr).Port), Service: svc("up")}}}, resultSuccess},
		{"grpc not serving", &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(gl.Addr().(*net.TCPAddr).Port), Service: svc("down")}}}, resultFailure},
		{"grpc not a server", &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(port)}}}, resultFailure},
	}
	for _, tc := range cases {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, out, err := h.probe(ctx, probeReadiness, tc.p, target)
		cancel()
		if err != nil || r != tc.want {
			t.Errorf("%s: result %s (%q) err %v, want %s", tc.name, r, out, err, tc.want)
		}
		// The words kubelet's ProbeWarning event carries, which the e2e
		// suite waits for.
		if want := "Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>."; r == resultWarning && !strings.HasPrefix(out, want) {
			t.Errorf("%s: output %q, want it to start with %q", tc.name, out, want)
		}
	}
	if gotUA != probeUserAgent || gotHeader != "yes" {
		t.Errorf("request had User-Agent %q, X-Probe %q", gotUA, gotHeader)
	}
	if _, _, err := h.probe(context.Background(), probeReadiness, httpProbe("/", intstr.FromString("nope")), target); err == nil {
		t.Error("an unknown port name did not fail the probe's run")
	}
}

// TestFallbackToLogs checks terminationMessagePolicy FallbackToLogsOnError:
// a failed container with no message gets the tail of its log, at most 80
// lines and 2048 bytes; a successful one gets nothing.
func TestFallbackToLogs(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers[0].TerminationMessagePolicy = v1.TerminationMessageFallbackToLogsOnError
	e, w, _ := probeEnv(t, pod)
	logFile := filepath.Join(t.TempDir(), "0.log")
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "2026-01-01T00:00:00.%09dZ stdout F line %03d %s\n", i, i, strings.Repeat("x", 10))
	}
	if err := os.WriteFile(logFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = e
	c := &criContainer{id: "cid", name: "a", exitCode: 1, logPath: logFile, state: runtimeapi.ContainerState_CONTAINER_EXITED}
	msg := w.terminationMessage(c)
	if !strings.HasSuffix(msg, "line 099 xxxxxxxxxx\n") || strings.Contains(msg, "line 019 ") || len(msg) == 0 {
		t.Fatalf("message %q", msg)
	}
	short := strings.Count(msg, "\n")
	if short != 80 {
		t.Errorf("%d lines, want the last 80", short)
	}
	for i := range 100 {
		fmt.Fprintf(&b, "2026-01-01T00:00:01.%09dZ stdout F %s\n", i, strings.Repeat("y", 100))
	}
	if err := os.WriteFile(logFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg := w.terminationMessage(c); len(msg) != fallbackLogBytes {
		t.Errorf("long log: %d bytes, want %d", len(msg), fallbackLogBytes)
	}
	c.exitCode = 0
	if msg := w.terminationMessage(c); msg != "" {
		t.Errorf("succeeded container got %q", msg)
	}
}

// TestHookActions runs httpGet and sleep lifecycle handlers: an httpGet
// hook goes to the pod's IP and fails only when the request does; a sleep
// hook waits its seconds on the clock, or until its deadline.
func TestHookActions(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		http.Error(w, "status does not count", http.StatusInternalServerError)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	pod := testPod()
	e, w, _ := probeEnv(t, pod)
	w.status = &v1.PodStatus{PodIP: "127.0.0.1"}
	c := &pod.Spec.Containers[0]
	get := &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/hook", Port: intstr.FromInt32(int32(port))}}
	if _, err := w.runHook(context.Background(), pod, c, "cid", get); err != nil || hits != 1 {
		t.Fatalf("httpGet hook: err %v, %d requests", err, hits)
	}
	srv.Close()
	if _, err := w.runHook(context.Background(), pod, c, "cid", get); err == nil {
		t.Fatal("httpGet hook to a closed server succeeded")
	}

	sleep := &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}}
	done := make(chan error, 1)
	go func() { _, err := w.runHook(context.Background(), pod, c, "cid", sleep); done <- err }()
	for !e.clock.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("sleep hook returned before its time: %v", err)
	default:
	}
	e.clock.Step(5 * time.Second)
	if err := <-done; err != nil {
		t.Fatalf("sleep hook: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.runHook(ctx, pod, c, "cid", sleep); err == nil {
		t.Fatal("sleep hook outlived its context")
	}
}

// TestWorkerContainerEvents: each container made and started gets
// kubelet's Created and Started events (the e2e suite waits for Started),
// and a start the runtime refuses a Failed one with its message.
func TestWorkerContainerEvents(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	e, w, rec := probeEnv(t, pod)
	w.pass(context.Background())
	ev := events(rec)
	count := func(want string) int {
		return len(slices.DeleteFunc(slices.Clone(ev), func(s string) bool { return s != want }))
	}
	if count("Normal Created Container created") != 2 || count("Normal Started Container started") != 2 {
		t.Fatalf("events %q: want Created and Started for each of the two containers", ev)
	}
	e.rt.InjectError("StartContainer", errors.New("no such file"))
	e.exit(t, "a", 1)
	w.pass(context.Background())
	if ev := events(rec); !slices.Contains(ev, "Warning Failed Error: no such file") {
		t.Errorf("events %q: want the failed start", ev)
	}
}
