package vk

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
)

// stopRecorder records, in order, the names of the containers stopped
// and of those whose hooks ran.
type stopRecorder struct {
	*critesting.FakeRuntimeService
	mu  sync.Mutex
	log []string
}

func (r *stopRecorder) name(id string) string {
	r.FakeRuntimeService.Lock()
	defer r.FakeRuntimeService.Unlock()
	if c, ok := r.Containers[id]; ok {
		return c.Metadata.Name
	}
	return id
}

func (r *stopRecorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *stopRecorder) StopContainer(ctx context.Context, id string, timeout int64) error {
	r.add("stop " + r.name(id))
	return r.FakeRuntimeService.StopContainer(ctx, id, timeout)
}

func (r *stopRecorder) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	r.add("exec " + r.name(id))
	return r.FakeRuntimeService.ExecSync(ctx, id, cmd, timeout)
}

func (r *stopRecorder) entries() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// sidecarPod has sidecar "sc" (startup and readiness probes), regular
// init container "init" and app container "a".
func sidecarPod(policy v1.RestartPolicy) *v1.Pod {
	pod := testPod()
	pod.Spec.RestartPolicy = policy
	always := v1.ContainerRestartPolicyAlways
	sc := v1.Container{Name: "sc", Image: "busybox", ImagePullPolicy: v1.PullNever, RestartPolicy: &always,
		StartupProbe: execProbe(1, 1), ReadinessProbe: execProbe(1, 1), LivenessProbe: execProbe(1, 1)}
	pod.Spec.InitContainers = append([]v1.Container{sc}, pod.Spec.InitContainers...)
	pod.Spec.Containers = pod.Spec.Containers[1:] // "b", renamed "a": no env to resolve
	pod.Spec.Containers[0].Name = "a"
	return pod
}

func has(t *testing.T, e *testEnv, name string) bool {
	t.Helper()
	e.rt.Lock()
	defer e.rt.Unlock()
	for _, c := range e.rt.Containers {
		if c.Metadata.Name == name {
			return true
		}
	}
	return false
}

// TestWorkerSidecar drives a pod with a sidecar as kubelet does: the
// sidecar's startup probe gates the next init container; its readiness
// counts in the pod's; a liveness failure and an exit restart it, even
// under restartPolicy Never.
func TestWorkerSidecar(t *testing.T) {
	e, w, rec := probeEnv(t, sidecarPod(v1.RestartPolicyNever))
	ctx := context.Background()
	w.pass(ctx)
	sc := e.container(t, "sc")
	if sc.State != runtimeapi.ContainerState_CONTAINER_RUNNING || has(t, e, "init") {
		t.Fatalf("first pass: sidecar %v, init made %v; want the sidecar alone", sc.State, has(t, e, "init"))
	}
	if _, ok := w.probes.byID[sc.Id]; !ok {
		t.Fatal("the sidecar is not probed")
	}
	st := e.last(t).Status
	cs := containerStatus(st, "sc")
	if st.Phase != v1.PodPending || cs.State.Running == nil || *cs.Started || cs.Ready || condition(st, v1.PodInitialized) != v1.ConditionFalse {
		t.Fatalf("before the startup probe: phase %s, sidecar %+v", st.Phase, cs)
	}
	w.pass(ctx)
	if has(t, e, "init") {
		t.Fatal("init container started before the sidecar's startup probe succeeded")
	}

	w.probes.set(sc.Id, probeStartup, resultSuccess)
	w.pass(ctx)
	if e.container(t, "init").State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatal("init container not started once the sidecar started")
	}
	if cs := containerStatus(e.last(t).Status, "sc"); !*cs.Started || cs.Ready {
		t.Errorf("started sidecar, readiness unknown: %+v", cs)
	}
	if cs := containerStatus(e.last(t).Status, "init"); !*cs.Started || cs.Ready {
		t.Errorf("running regular init container: started %v ready %v, want true false", *cs.Started, cs.Ready)
	}
	e.exit(t, "init", 0)
	w.pass(ctx)
	st = e.last(t).Status
	if e.container(t, "a").State != runtimeapi.ContainerState_CONTAINER_RUNNING || st.Phase != v1.PodRunning {
		t.Fatalf("after init: app container %v, phase %s", e.container(t, "a").State, st.Phase)
	}
	if !containerStatus(st, "init").Ready || condition(st, v1.PodInitialized) != v1.ConditionTrue {
		t.Errorf("completed init: ready %v, Initialized %s", containerStatus(st, "init").Ready, condition(st, v1.PodInitialized))
	}
	for _, ct := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		for _, c := range st.Conditions {
			if c.Type == ct && (c.Status != v1.ConditionFalse || c.Message != "containers with unready status: [sc]") {
				t.Errorf("%s with the sidecar unready: %+v", ct, c)
			}
		}
	}

	w.probes.set(sc.Id, probeReadiness, resultSuccess)
	w.pass(ctx)
	st = e.last(t).Status
	if !containerStatus(st, "sc").Ready || condition(st, v1.PodReady) != v1.ConditionTrue || condition(st, v1.ContainersReady) != v1.ConditionTrue {
		t.Fatalf("sidecar ready: %+v", st)
	}
	w.probes.set(sc.Id, probeReadiness, resultFailure)
	w.pass(ctx)
	if st := e.last(t).Status; containerStatus(st, "sc").Ready || condition(st, v1.PodReady) != v1.ConditionFalse {
		t.Fatalf("sidecar unready again: %+v", st)
	}

	// A liveness failure restarts the sidecar alone, restartPolicy Never
	// notwithstanding.
	e.clock.Step(time.Minute)
	w.probes.set(sc.Id, probeLiveness, resultFailure)
	w.pass(ctx)
	now := e.container(t, "sc")
	if now.Metadata.Attempt != 1 || now.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the liveness failure: attempt %d state %v", now.Metadata.Attempt, now.State)
	}
	if a := e.container(t, "a"); a.Metadata.Attempt != 0 || a.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("app container touched: attempt %d state %v", a.Metadata.Attempt, a.State)
	}
	if init := e.container(t, "init"); init.Metadata.Attempt != 0 {
		t.Error("the regular init container ran again")
	}
	cs = containerStatus(e.last(t).Status, "sc")
	if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.Message != "Init container sc failed liveness probe" {
		t.Fatalf("restarted sidecar: %+v", cs)
	}
	if ev := events(rec); !slices.ContainsFunc(ev, func(s string) bool {
		return strings.HasPrefix(s, "Normal Killing Init container sc failed liveness probe")
	}) {
		t.Errorf("events %q", ev)
	}
	if st := e.last(t).Status; st.Phase != v1.PodRunning || condition(st, v1.PodInitialized) != v1.ConditionTrue {
		t.Errorf("while the sidecar restarts: phase %s Initialized %s", st.Phase, condition(st, v1.PodInitialized))
	}

	// It exits: restarted after the back-off its first restart started.
	e.clock.Step(time.Second)
	e.exit(t, "sc", 1)
	w.pass(ctx)
	cs = containerStatus(e.last(t).Status, "sc")
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCrashLoopBackOff {
		t.Fatalf("sidecar in back-off: %+v", cs.State)
	}
	if st := e.last(t).Status; st.Phase != v1.PodRunning {
		t.Errorf("phase %s while the sidecar backs off", st.Phase)
	}
	e.clock.Step(backoffInitial)
	w.pass(ctx)
	if now := e.container(t, "sc"); now.Metadata.Attempt != 2 || now.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the back-off: attempt %d state %v", now.Metadata.Attempt, now.State)
	}
}

// TestWorkerSidecarPostStart checks that a sidecar's postStart hook runs
// before the next init container starts.
func TestWorkerSidecarPostStart(t *testing.T) {
	pod := sidecarPod(v1.RestartPolicyAlways)
	sc := &pod.Spec.InitContainers[0]
	sc.StartupProbe, sc.ReadinessProbe, sc.LivenessProbe = nil, nil, nil
	sc.Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	e, w, _ := probeEnv(t, pod)
	rt := &stopRecorder{FakeRuntimeService: e.rt}
	e.p.rt.RuntimeService = rt
	w.pass(context.Background())
	if e.container(t, "init").State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatal("init container not started after a sidecar with no startup probe")
	}
	calls := e.rt.GetCalls()
	hook := slices.Index(calls, "ExecSync")
	starts := 0
	for i, c := range calls {
		if c == "StartContainer" {
			starts++
			if starts == 2 && (hook < 0 || i < hook) {
				t.Fatalf("calls %v: the init container started before the sidecar's postStart", calls)
			}
		}
	}
	if got := rt.entries(); !slices.Equal(got, []string{"exec sc"}) {
		t.Errorf("hooks %v", got)
	}
}

// TestWorkerSidecarTermination checks deletion: every preStop hook runs,
// and the sidecars stop after the app containers, the later sidecar
// first.
func TestWorkerSidecarTermination(t *testing.T) {
	pod := sidecarPod(v1.RestartPolicyAlways)
	pod.Spec.InitContainers = pod.Spec.InitContainers[:1]
	sc := &pod.Spec.InitContainers[0]
	sc.StartupProbe, sc.ReadinessProbe, sc.LivenessProbe = nil, nil, nil
	sc2 := sc.DeepCopy()
	sc2.Name = "sc2"
	preStop := &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	sc.Lifecycle, sc2.Lifecycle = preStop, preStop
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, *sc2)
	e, w, _ := probeEnv(t, pod)
	w.pass(context.Background())
	for _, n := range []string{"sc", "sc2", "a"} {
		if e.container(t, n).State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("%s not running", n)
		}
	}
	rt := &stopRecorder{FakeRuntimeService: e.rt}
	e.p.rt.RuntimeService = rt
	w.delete(30)
	if done := w.pass(context.Background()); !done {
		t.Fatal("delete did not finish")
	}
	got := rt.entries()
	stops := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return !strings.HasPrefix(s, "stop ") })
	if !slices.Equal(stops, []string{"stop a", "stop sc2", "stop sc"}) {
		t.Errorf("stopped in order %v, want a, sc2, sc", stops)
	}
	for _, n := range []string{"sc", "sc2"} {
		if !slices.Contains(got, "exec "+n) {
			t.Errorf("%v: no preStop hook for %s", got, n)
		}
	}
	if final := e.last(t).Status; final.Phase != v1.PodSucceeded && final.Phase != v1.PodFailed {
		t.Errorf("final phase %s", final.Phase)
	}
}

// TestWorkerSidecarJobDone checks that a pod whose app containers are done
// (restartPolicy Never) stops its sidecars, with their preStop hooks,
// rather than keep running for them, and succeeds.
func TestWorkerSidecarJobDone(t *testing.T) {
	pod := sidecarPod(v1.RestartPolicyNever)
	sc := &pod.Spec.InitContainers[0]
	sc.StartupProbe, sc.ReadinessProbe, sc.LivenessProbe = nil, nil, nil
	sc.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	e, w, _ := probeEnv(t, pod)
	ctx := context.Background()
	w.pass(ctx)
	e.exit(t, "init", 0)
	w.pass(ctx)
	if e.container(t, "a").State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatal("app container not running")
	}
	rt := &stopRecorder{FakeRuntimeService: e.rt}
	e.p.rt.RuntimeService = rt
	e.exit(t, "a", 0)
	w.pass(ctx)
	if got := rt.entries(); !slices.Equal(got, []string{"exec sc", "stop sc"}) {
		t.Errorf("calls %v, want the sidecar's preStop, then its stop", got)
	}
	if sc := e.container(t, "sc"); sc.Metadata.Attempt != 0 || sc.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("sidecar attempt %d state %v; want stopped, not restarted", sc.Metadata.Attempt, sc.State)
	}
	st := e.last(t).Status
	if st.Phase != v1.PodSucceeded {
		t.Errorf("phase %s, want Succeeded", st.Phase)
	}
	for _, sb := range e.rt.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("sandbox %s still ready", sb.Id)
		}
	}
}
