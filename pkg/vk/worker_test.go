package vk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeObjects is an objectSource over maps.
type fakeObjects struct {
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

func (f *fakeObjects) configMap(ns, name string) (*v1.ConfigMap, error) {
	if cm, ok := f.configMaps[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, fmt.Errorf("%w: configMap %s/%s", errNotFound, ns, name)
}

func (f *fakeObjects) secret(ns, name string) (*v1.Secret, error) {
	if s, ok := f.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("%w: secret %s/%s", errNotFound, ns, name)
}

type testEnv struct {
	p     *Provider
	rt    *critesting.FakeRuntimeService
	clock *clocktesting.FakeClock

	mu       sync.Mutex
	notified []*v1.Pod
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	rt := critesting.NewFakeRuntimeService()
	is := critesting.NewFakeImageService()
	is.SetFakeImages([]string{"busybox"})
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p, err := New(context.Background(), Config{
		NodeName: "node1", NodeIPs: []string{"10.0.0.1"}, StateDir: t.TempDir(),
		Runtime: &Runtime{RuntimeService: rt, Images: is}, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{p: p, rt: rt, clock: clk}
	p.objects = &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{"ns/cfg": {Data: map[string]string{"k": "from-cm"}}},
		secrets:    map[string]*v1.Secret{"ns/sec": {Data: map[string][]byte{"pw": []byte("s3cret")}}},
	}
	p.NotifyPods(context.Background(), func(pod *v1.Pod) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.notified = append(e.notified, pod)
	})
	return e
}

func (e *testEnv) last(t *testing.T) *v1.Pod {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.notified) == 0 {
		t.Fatal("no status reported")
	}
	return e.notified[len(e.notified)-1]
}

// container returns the fake's newest container named name.
func (e *testEnv) container(t *testing.T, name string) *critesting.FakeContainer {
	t.Helper()
	e.rt.Lock()
	defer e.rt.Unlock()
	var found *critesting.FakeContainer
	for _, c := range e.rt.Containers {
		if c.Metadata.Name == name && (found == nil || c.Metadata.Attempt > found.Metadata.Attempt) {
			found = c
		}
	}
	if found == nil {
		t.Fatalf("no container %s in the runtime", name)
	}
	return found
}

// exit makes the fake's newest container named name exit with code now.
func (e *testEnv) exit(t *testing.T, name string, code int32) {
	c := e.container(t, name)
	e.rt.Lock()
	defer e.rt.Unlock()
	c.State = runtimeapi.ContainerState_CONTAINER_EXITED
	c.ExitCode = code
	c.FinishedAt = e.clock.Now().UnixNano()
}

func testPod() *v1.Pod {
	grace := int64(7)
	app := func(name string) v1.Container {
		return v1.Container{Name: name, Image: "busybox", ImagePullPolicy: v1.PullNever, TerminationMessagePath: "/dev/termination-log"}
	}
	a := app("a")
	a.Env = []v1.EnvVar{
		{Name: "FROM_CM", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "k"}}},
		{Name: "IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "X", Value: "$(FROM_CM)-$(IP)"},
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"},
		Spec: v1.PodSpec{
			NodeName: "node1", RestartPolicy: v1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
			InitContainers: []v1.Container{app("init")},
			Containers:     []v1.Container{a, app("b")},
		},
	}
}

// TestWorkerLifecycle drives one pod through the fake runtime: sandbox,
// init container to completion, app containers, a crash restarted at once
// and then with back-off, and deletion.
func TestWorkerLifecycle(t *testing.T) {
	e := newTestEnv(t)
	w := newPodWorker(e.p, testPod())

	w.pass(context.Background())
	if n := len(e.rt.Sandboxes); n != 1 {
		t.Fatalf("%d sandboxes after the first pass, want 1", n)
	}
	if e.container(t, "init").State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatal("init container not running")
	}
	st := e.last(t).Status
	if st.Phase != v1.PodPending || condition(st, v1.PodInitialized) != v1.ConditionFalse {
		t.Fatalf("while initialising: phase %s, Initialized %s", st.Phase, condition(st, v1.PodInitialized))
	}
	if ws := containerStatus(st, "a").State.Waiting; ws == nil || ws.Reason != reasonPodInitializing {
		t.Errorf("app container while initialising: %+v", containerStatus(st, "a").State)
	}

	e.exit(t, "init", 0)
	w.pass(context.Background())
	st = e.last(t).Status
	if st.Phase != v1.PodRunning || condition(st, v1.PodReady) != v1.ConditionTrue || st.PodIP != critesting.FakePodSandboxIPs[0] {
		t.Fatalf("after init: phase %s Ready %s IP %q", st.Phase, condition(st, v1.PodReady), st.PodIP)
	}
	if id := containerStatus(st, "a").ContainerID; !strings.HasPrefix(id, critesting.FakeRuntimeName+"://") {
		t.Errorf("containerID %q", id)
	}

	// First crash: restarted at once.
	e.clock.Step(time.Minute)
	e.exit(t, "a", 1)
	w.pass(context.Background())
	if c := e.container(t, "a"); c.Metadata.Attempt != 1 || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the first crash: attempt %d state %v", c.Metadata.Attempt, c.State)
	}
	// Second crash: 10 s of back-off.
	e.clock.Step(time.Second)
	e.exit(t, "a", 2)
	w.pass(context.Background())
	cs := containerStatus(e.last(t).Status, "a")
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCrashLoopBackOff || cs.RestartCount != 1 ||
		cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 2 {
		t.Fatalf("in back-off: %+v", cs)
	}
	if w.next <= 0 || w.next > backoffInitial {
		t.Errorf("wake-up in %v, want within %v", w.next, backoffInitial)
	}
	e.clock.Step(backoffInitial)
	w.pass(context.Background())
	if c := e.container(t, "a"); c.Metadata.Attempt != 2 || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("after the back-off: attempt %d state %v", c.Metadata.Attempt, c.State)
	}
	if cs := containerStatus(e.last(t).Status, "a"); cs.RestartCount != 2 || cs.State.Running == nil {
		t.Errorf("restarted: %+v", cs)
	}
	// Delete: containers stopped with the grace period, sandbox removed.
	w.delete(3)
	if done := w.pass(context.Background()); !done {
		t.Fatal("pass after delete did not finish the pod")
	}
	if len(e.rt.Sandboxes) != 0 || len(e.rt.Containers) != 0 {
		t.Errorf("left in the runtime: %d sandboxes, %d containers", len(e.rt.Sandboxes), len(e.rt.Containers))
	}
	final := e.last(t).Status
	if final.Phase != v1.PodFailed && final.Phase != v1.PodSucceeded {
		t.Errorf("final phase %s", final.Phase)
	}
	for _, cs := range append(final.InitContainerStatuses, final.ContainerStatuses...) {
		if cs.State.Terminated == nil {
			t.Errorf("container %s not terminated in the final status: %+v", cs.Name, cs.State)
		}
	}
	if !slices.Contains(e.rt.Called, "StopContainer") {
		t.Error("StopContainer not called")
	}
}

// TestWorkerConfigError checks that a missing configMap key keeps the
// container waiting with CreateContainerConfigError, and that it starts
// once the key is there.
func TestWorkerConfigError(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Key = "missing"
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	cs := containerStatus(e.last(t).Status, "a")
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCreateConfigError || !strings.Contains(cs.State.Waiting.Message, "missing") {
		t.Fatalf("status %+v", cs.State)
	}
	e.p.objects.(*fakeObjects).configMaps["ns/cfg"].Data["missing"] = "now"
	e.clock.Step(time.Minute)
	w.pass(context.Background())
	if cs := containerStatus(e.last(t).Status, "a"); cs.State.Running == nil {
		t.Fatalf("status after the key appeared: %+v", cs.State)
	}
}

// TestWorkerVolumeFailed: a volume that cannot be set up keeps the pod
// waiting in ContainerCreating with kubelet's FailedMount event naming it,
// and the pod starts once it can be.
func TestWorkerVolumeFailed(t *testing.T) {
	e := newTestEnv(t)
	rec := record.NewFakeRecorder(100)
	e.p.recorder = rec
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Volumes = []v1.Volume{{Name: "settings", VolumeSource: v1.VolumeSource{
		ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "later"}}}}}
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	if n := len(e.rt.Sandboxes); n != 0 {
		t.Fatalf("%d sandboxes made before the volume could be set up", n)
	}
	if cs := containerStatus(e.last(t).Status, "a"); cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonContainerCreating {
		t.Fatalf("status %+v, want waiting in %s", cs.State, reasonContainerCreating)
	}
	want := `Warning FailedMount MountVolume.SetUp failed for volume "settings" : not found: configMap ns/later`
	if evs := events(rec); !slices.Contains(evs, want) {
		t.Errorf("events %q, want %q", evs, want)
	}
	e.p.objects.(*fakeObjects).configMaps["ns/later"] = &v1.ConfigMap{Data: map[string]string{"k": "v"}}
	e.clock.Step(time.Minute)
	w.pass(context.Background())
	w.pass(context.Background())
	if cs := containerStatus(e.last(t).Status, "a"); cs.State.Running == nil {
		t.Fatalf("status once the volume can be set up: %+v", cs.State)
	}
}

// TestWorkerNeverPolicy checks restartPolicy Never: a failed init
// container fails the pod, nothing restarts, and the sandbox stops.
func TestWorkerNeverPolicy(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	e.exit(t, "init", 1)
	w.pass(context.Background())
	if st := e.last(t).Status; st.Phase != v1.PodFailed {
		t.Fatalf("phase %s, want Failed", st.Phase)
	}
	w.pass(context.Background())
	for _, sb := range e.rt.Sandboxes {
		if sb.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
			t.Errorf("sandbox %s still ready", sb.Id)
		}
	}
	e.rt.Lock()
	n := len(e.rt.Containers)
	e.rt.Unlock()
	if n != 1 {
		t.Errorf("%d containers, want only the failed init container", n)
	}
}

func condition(st v1.PodStatus, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func containerStatus(st v1.PodStatus, name string) *v1.ContainerStatus {
	for i := range st.ContainerStatuses {
		if st.ContainerStatuses[i].Name == name {
			return &st.ContainerStatuses[i]
		}
	}
	for i := range st.InitContainerStatuses {
		if st.InitContainerStatuses[i].Name == name {
			return &st.InitContainerStatuses[i]
		}
	}
	return &v1.ContainerStatus{}
}

// TestWorkerSpecChange checks that a running container whose spec changed
// (a new image) is stopped and started again at once, without back-off.
func TestWorkerSpecChange(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	pod.Spec.InitContainers = nil
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	if e.container(t, "b").State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatal("b not running")
	}
	e.p.rt.Images.(*critesting.FakeImageService).SetFakeImages([]string{"busybox", "busybox:2"})
	updated := pod.DeepCopy()
	updated.Spec.Containers[1].Image = "busybox:2"
	w.setPod(updated)
	w.pass(context.Background())
	c := e.container(t, "b")
	if c.Metadata.Attempt != 1 || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING || c.Image.UserSpecifiedImage != "busybox:2" {
		t.Fatalf("after the image change: attempt %d state %v image %v", c.Metadata.Attempt, c.State, c.Image)
	}
	if a := e.container(t, "a"); a.Metadata.Attempt != 0 {
		t.Error("the unchanged container was restarted")
	}
}

// TestWriteTerminationFile: the file is writable by any user whatever the
// umask, as kubelet's, since the container may run as any uid.
func TestWriteTerminationFile(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "0-termination-log")
	if err := writeTerminationFile(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666 || fi.Size() != 0 {
		t.Fatalf("mode %v size %d, want -rw-rw-rw- and empty", fi.Mode(), fi.Size())
	}
}

// TestWorkerReadinessGates: conditions that controllers set on the pod
// (here readiness gates') reach the worker through seeStatus, wake it,
// decide Ready with the containers' readiness, and are kept, as the API
// server has them, in the status it reports.
func TestWorkerReadinessGates(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/one"}, {ConditionType: "example.com/two"}}
	e := newTestEnv(t)
	w := newPodWorker(e.p, pod)
	t.Cleanup(w.probes.stopAll)
	w.pass(context.Background())
	ready := func() v1.PodCondition {
		t.Helper()
		for _, c := range e.last(t).Status.Conditions {
			if c.Type == v1.PodReady {
				return c
			}
		}
		t.Fatal("no Ready condition")
		return v1.PodCondition{}
	}
	if r := ready(); r.Status != v1.ConditionFalse || r.Reason != "ReadinessGatesNotReady" {
		t.Fatalf("Ready with no gate condition: %+v", r)
	}
	gates := func(one, two v1.ConditionStatus) {
		t.Helper()
		api := e.last(t).DeepCopy()
		api.Status.Conditions = append(externalConditionsDropped(api.Status.Conditions),
			v1.PodCondition{Type: "example.com/one", Status: one}, v1.PodCondition{Type: "example.com/two", Status: two})
		w.seeStatus(api)
		if !woken(w, time.Second) {
			t.Fatal("a gate's condition changed and the worker was not woken")
		}
		w.pass(context.Background())
	}
	gates(v1.ConditionTrue, v1.ConditionFalse)
	if r := ready(); r.Status != v1.ConditionFalse {
		t.Fatalf("Ready with one gate of two: %+v", r)
	}
	gates(v1.ConditionTrue, v1.ConditionTrue)
	if r := ready(); r.Status != v1.ConditionTrue {
		t.Fatalf("not Ready with both gates True: %+v", r)
	}
	// A pass with nothing new keeps the gates' conditions in the status.
	w.pass(context.Background())
	st := e.last(t).Status
	if n := len(externalConditions(st.Conditions)); n != 2 {
		t.Fatalf("%d conditions of others kept, want 2: %+v", n, st.Conditions)
	}
	gates(v1.ConditionFalse, v1.ConditionTrue)
	if r := ready(); r.Status != v1.ConditionFalse {
		t.Fatalf("Ready after a gate went False: %+v", r)
	}
	// The same conditions again: no wake.
	w.seeStatus(e.last(t))
	if woken(w, 50*time.Millisecond) {
		t.Error("woken by a status with the same conditions of others")
	}
}

// externalConditionsDropped is conds without the conditions of others.
func externalConditionsDropped(conds []v1.PodCondition) []v1.PodCondition {
	var out []v1.PodCondition
	for _, c := range conds {
		if ownCondition(c.Type) {
			out = append(out, c)
		}
	}
	return out
}

// TestWorkerFinalStatus: a deleted pod's last status (its containers
// terminated) is written to the API server before the object is deleted,
// and a deletion that comes again once the worker is done (the object held
// by a finalizer) says that status again, on the object as it is now,
// instead of running a worker that would report the containers as never
// started.
func TestWorkerFinalStatus(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	e := newTestEnv(t)
	cs := fake.NewClientset(pod.DeepCopy())
	e.p.cfg.Client = cs
	w := newPodWorker(e.p, pod)
	t.Cleanup(w.probes.stopAll)
	e.p.mu.Lock()
	e.p.workers[pod.UID] = w
	e.p.mu.Unlock()
	w.pass(context.Background())

	deleting := pod.DeepCopy()
	now := metav1.NewTime(e.clock.Now())
	grace := int64(30)
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &now, &grace
	w.setPod(deleting)
	w.delete(grace)
	if done := w.pass(context.Background()); !done {
		t.Fatal("delete did not finish")
	}
	e.p.forget(w)
	var verbs []string
	for _, a := range cs.Actions() {
		verbs = append(verbs, a.GetVerb()+"/"+a.GetSubresource())
	}
	if i, j := slices.Index(verbs, "patch/status"), slices.Index(verbs, "delete/"); i < 0 || j < 0 || i > j {
		t.Fatalf("API calls %v: want the status patched, then the pod deleted", verbs)
	}
	patch := string(cs.Actions()[slices.Index(verbs, "patch/status")].(k8stesting.PatchAction).GetPatch())
	if !strings.Contains(patch, `"terminated"`) || !strings.Contains(patch, `"uid":"uid-1"`) {
		t.Errorf("status patch %s: want the terminated containers, on the pod's uid", patch)
	}

	// Deleted again, with no grace left.
	zero := int64(0)
	again := deleting.DeepCopy()
	again.DeletionGracePeriodSeconds = &zero
	e.mu.Lock()
	e.notified = nil
	e.mu.Unlock()
	if err := e.p.DeletePod(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	e.p.mu.Lock()
	_, running := e.p.workers[pod.UID]
	e.p.mu.Unlock()
	if running {
		t.Error("a worker runs for a pod that was stopped and removed")
	}
	got := e.last(t)
	if got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 0 {
		t.Errorf("re-reported on the old object: deletion grace %v", got.DeletionGracePeriodSeconds)
	}
	for _, c := range got.Status.ContainerStatuses {
		if c.State.Terminated == nil {
			t.Errorf("container %s re-reported as %+v, want terminated", c.Name, c.State)
		}
	}
	// Gone from the API server: forgotten.
	e.p.PodGone(again)
	e.p.mu.Lock()
	_, kept := e.p.finished[pod.UID]
	e.p.mu.Unlock()
	if kept {
		t.Error("the finished pod is still kept after it is gone")
	}
}

// TestWorkerActiveDeadline: a pod that has run activeDeadlineSeconds since
// its start is Failed with kubelet's DeadlineExceeded, whatever its
// containers do after, and they are stopped; a deadline moved by an
// update of the pod counts from the same start.
func TestWorkerActiveDeadline(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = nil
	e, w, rec := probeEnv(t, pod)
	w.pass(context.Background())
	if st := e.last(t).Status; st.Phase != v1.PodRunning {
		t.Fatalf("phase %s, want Running", st.Phase)
	}
	// No deadline yet, then one of 30 s set by an update at 10 s.
	e.clock.Step(10 * time.Second)
	d := int64(30)
	upd := pod.DeepCopy()
	upd.Spec.ActiveDeadlineSeconds = &d
	w.setPod(upd)
	w.pass(context.Background())
	if st := e.last(t).Status; st.Phase != v1.PodRunning {
		t.Fatalf("before the deadline: phase %s", st.Phase)
	}
	e.clock.Step(21 * time.Second)
	w.pass(context.Background())
	if ev := events(rec); !slices.Contains(ev, "Normal DeadlineExceeded Pod was active on the node longer than the specified deadline") {
		t.Errorf("events %q", ev)
	}
	// Not Failed while a container still runs: the pod controller writes
	// nothing more of a pod the API server has terminal.
	if st := e.last(t).Status; st.Phase == v1.PodFailed {
		t.Fatalf("Failed with containers running: %+v", st.ContainerStatuses)
	}
	// The containers are stopped, then it is Failed, and exiting 0 does not
	// make it Succeeded.
	w.pass(context.Background())
	for _, name := range []string{"a", "b"} {
		if c := e.container(t, name); c.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Errorf("container %s %v after the deadline, want exited", name, c.State)
		}
	}
	w.pass(context.Background())
	st := e.last(t).Status
	if st.Phase != v1.PodFailed || st.Reason != "DeadlineExceeded" || st.Message != "Pod was active on the node longer than the specified deadline" {
		t.Fatalf("once stopped: phase %s reason %q message %q", st.Phase, st.Reason, st.Message)
	}
	for _, cs := range st.ContainerStatuses {
		if cs.State.Terminated == nil {
			t.Errorf("container %s %+v in the Failed status, want terminated", cs.Name, cs.State)
		}
	}
}

// TestWorkerDeleteAgain: a repeated deletion leaves the kill under way
// alone; one with a shorter grace period cuts it short to start again.
func TestWorkerDeleteAgain(t *testing.T) {
	w := &podWorker{wake: make(chan struct{}, 1)}
	cancels := 0
	w.cancelPass = func() { cancels++ }
	w.delete(30)
	w.delete(30)
	w.delete(45)
	if cancels != 1 || w.grace != 30 {
		t.Errorf("after deletions with 30, 30, 45 s: %d passes cancelled, grace %d; want 1 and 30", cancels, w.grace)
	}
	w.delete(0)
	if cancels != 2 || w.grace != 0 {
		t.Errorf("a shorter grace period: %d passes cancelled, grace %d; want 2 and 0", cancels, w.grace)
	}
}
