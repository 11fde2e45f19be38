package vk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cri-compose/cri-compose/test/suite"
)

// cgroupLimits is what the container sees of its own limits: its memory
// limit in bytes and its CPU quota and period, on cgroup v1 or v2.
func cgroupLimits(t *testing.T, p *v1.Pod, container string) string {
	t.Helper()
	return strings.TrimSpace(execIn(t, p, container, "sh", "-c", suite.CgroupLimitsScript))
}

func podCondition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// resources is requests and limits of cpu and memory.
func resources(reqCPU, reqMem, limCPU, limMem string) v1.ResourceRequirements {
	return v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(reqCPU), v1.ResourceMemory: resource.MustParse(reqMem)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(limCPU), v1.ResourceMemory: resource.MustParse(limMem)},
	}
}

// sameResources: the two say the same of cpu and memory.
func sameResources(a *v1.ResourceRequirements, b v1.ResourceRequirements) bool {
	if a == nil {
		return false
	}
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if x, y := a.Requests[r], b.Requests[r]; x.Cmp(y) != 0 {
			return false
		}
		if x, y := a.Limits[r], b.Limits[r]; x.Cmp(y) != 0 {
			return false
		}
	}
	return true
}

// TestInPlaceResize patches a running pod through the resize subresource
// (what `kubectl patch --subresource resize` does): the container whose
// resizePolicy is NotRequired gets its new cgroup limits in place, without
// a restart; the one that asks RestartContainer for memory is restarted
// with its new limit, and again for a new memory request alone. The status is kubelet's: containerStatuses[].resources
// and allocatedResources as the spec, no resize condition left, and
// observedGeneration caught up. A resize beyond what the node's other pods
// leave is Deferred, with kubelet's message, until they are gone.
func TestInPlaceResize(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	zero := int64(0)
	app := busybox("app", "exec sleep 12345")
	app.Resources = resources("100m", "32Mi", "200m", "64Mi")
	rs := busybox("rs", "exec sleep 12345")
	rs.Resources = resources("100m", "32Mi", "200m", "64Mi")
	rs.ResizePolicy = []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "resized", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Containers: []v1.Container{app, rs}},
	})
	p := waitRunning(t, ns, pod.Name)
	for _, c := range []v1.Container{app, rs} {
		cs := containerStatus(p, c.Name)
		if !sameResources(cs.Resources, c.Resources) || cs.AllocatedResources.Memory().Cmp(resource.MustParse("32Mi")) != 0 {
			t.Fatalf("%s before the resize: resources %v allocated %v, want the spec's %v", c.Name, cs.Resources, cs.AllocatedResources, c.Resources)
		}
	}
	if got, want := cgroupLimits(t, p, "app"), fmt.Sprintf("%d 20000 100000", 64<<20); got != want {
		t.Fatalf("app's cgroup before the resize: %q, want %q", got, want)
	}
	appID, rsID := containerStatus(p, "app").ContainerID, containerStatus(p, "rs").ContainerID

	ctx := context.Background()
	patch := `{"spec":{"containers":[` +
		`{"name":"app","resources":{"requests":{"cpu":"150m","memory":"48Mi"},"limits":{"cpu":"300m","memory":"128Mi"}}},` +
		`{"name":"rs","resources":{"limits":{"memory":"96Mi"}}}]}}`
	resized, err := client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("patch the resize subresource: %v", err)
	}
	wantApp := resources("150m", "48Mi", "300m", "128Mi")
	wantRs := resources("100m", "32Mi", "200m", "96Mi")
	waitFor(t, "the resize done", time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		a, r := containerStatus(p, "app"), containerStatus(p, "rs")
		done := sameResources(a.Resources, wantApp) && sameResources(r.Resources, wantRs) && r.State.Running != nil &&
			podCondition(p, v1.PodResizeInProgress) == nil && podCondition(p, v1.PodResizePending) == nil &&
			p.Status.ObservedGeneration == resized.Generation
		return done, fmt.Sprintf("%s; app %v; rs %v; observedGeneration %d of %d", podSummary(p), a.Resources, r.Resources, p.Status.ObservedGeneration, resized.Generation)
	})
	if got, want := cgroupLimits(t, p, "app"), fmt.Sprintf("%d 30000 100000", 128<<20); got != want {
		t.Errorf("app's cgroup after the resize: %q, want %q", got, want)
	}
	if got, want := cgroupLimits(t, p, "rs"), fmt.Sprintf("%d 20000 100000", 96<<20); got != want {
		t.Errorf("rs's cgroup after the resize: %q, want %q", got, want)
	}
	a, r := containerStatus(p, "app"), containerStatus(p, "rs")
	if a.ContainerID != appID || a.RestartCount != 0 {
		t.Errorf("app (resizePolicy NotRequired): container %s restarts %d, want %s not restarted", a.ContainerID, a.RestartCount, appID)
	}
	if r.ContainerID == rsID || r.RestartCount != 1 {
		t.Errorf("rs (memory RestartContainer): container %s restarts %d, want a new container, restarted once", r.ContainerID, r.RestartCount)
	}
	if a.AllocatedResources.Memory().Cmp(resource.MustParse("48Mi")) != 0 || a.AllocatedResources.Cpu().Cmp(resource.MustParse("150m")) != 0 {
		t.Errorf("app's allocatedResources %v, want the new requests", a.AllocatedResources)
	}

	// A memory request alone: no cgroup v1 value follows it, but rs's
	// resizePolicy restarts it for memory, as kubelet does.
	req := `{"spec":{"containers":[{"name":"rs","resources":{"requests":{"memory":"48Mi"}}}]}}`
	resized, err = client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(req), metav1.PatchOptions{}, "resize")
	if err != nil {
		t.Fatalf("patch rs's memory request: %v", err)
	}
	wantRs = resources("100m", "48Mi", "200m", "96Mi")
	waitFor(t, "rs restarted for its memory request", time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		r := containerStatus(p, "rs")
		return r.RestartCount == 2 && r.State.Running != nil && sameResources(r.Resources, wantRs) &&
				podCondition(p, v1.PodResizeInProgress) == nil && p.Status.ObservedGeneration == resized.Generation,
			fmt.Sprintf("%s; rs restarts %d %v", podSummary(p), r.RestartCount, r.Resources)
	})
	if a := containerStatus(p, "app"); a.ContainerID != appID {
		t.Errorf("app restarted (%s, was %s) for rs's resize", a.ContainerID, appID)
	}

	// More CPU than the other pods leave (the API server itself refuses
	// more than the node's allocatable): Deferred, with kubelet's message,
	// and nothing changes until they are gone.
	hog := busybox("hog", "exec sleep 12345")
	hog.Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m")}
	createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hog", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool), Containers: []v1.Container{hog}},
	})
	waitRunning(t, ns, "hog")
	more := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"600m"},"limits":{"cpu":"700m"}}}]}}`
	if _, err := client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(more), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("patch a resize beyond what is left: %v", err)
	}
	var pending *v1.PodCondition
	waitFor(t, "PodResizePending Deferred", time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		pending = podCondition(p, v1.PodResizePending)
		return pending != nil && pending.Reason == v1.PodReasonDeferred, fmt.Sprintf("%s; pending %+v", podSummary(p), pending)
	})
	if !strings.HasPrefix(pending.Message, "Node didn't have enough resource: cpu, requested: 700, used: ") || pending.Status != v1.ConditionTrue {
		t.Errorf("PodResizePending %+v: want True with kubelet's message for cpu (requested 700 milli-CPU)", pending)
	}
	if a := containerStatus(p, "app"); !sameResources(a.Resources, wantApp) || a.ContainerID != appID {
		t.Errorf("app while its resize is deferred: %s %v, want %s unchanged at %v", a.ContainerID, a.Resources, appID, wantApp)
	}
	if got, want := cgroupLimits(t, p, "app"), fmt.Sprintf("%d 30000 100000", 128<<20); got != want {
		t.Errorf("app's cgroup while its resize is deferred: %q, want %q unchanged", got, want)
	}
	deletePod(t, ns, "hog", time.Minute)
	waitFor(t, "the deferred resize done once the hog is gone", time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		a := containerStatus(p, "app")
		return a.Resources.Limits.Cpu().MilliValue() == 700 && podCondition(p, v1.PodResizePending) == nil,
			fmt.Sprintf("%s; app %v; pending %+v", podSummary(p), a.Resources, podCondition(p, v1.PodResizePending))
	})
	if got, want := cgroupLimits(t, p, "app"), fmt.Sprintf("%d 70000 100000", 128<<20); got != want {
		t.Errorf("app's cgroup after the deferred resize: %q, want %q", got, want)
	}
}

// TestResizeBelowUsage: a memory limit lowered below what the container
// uses is not applied, as kubelet guards it (cgroup v1 would refuse it,
// v2 would OOM-kill the container): PodResizeInProgress says Error with
// the usage, the cgroup keeps its limit and the container runs on. Once it
// uses less, a retry lowers the limit.
func TestResizeBelowUsage(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	zero := int64(0)
	// 48 MiB in the pod's shared memory are charged to the container that
	// wrote them, and a kernel without swap cannot reclaim them.
	app := busybox("app", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=48 && touch /tmp/filled && exec sleep 12345")
	app.Resources = resources("100m", "64Mi", "200m", "128Mi")
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Containers: []v1.Container{app}},
	})
	p := waitRunning(t, ns, pod.Name)
	waitFor(t, "the shared memory filled", time.Minute, func() (bool, string) {
		out := execIn(t, p, "app", "sh", "-c", "test -e /tmp/filled && echo yes || echo no")
		return strings.TrimSpace(out) == "yes", out
	})
	id := containerStatus(p, "app").ContainerID

	ctx := context.Background()
	patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"memory":"32Mi"},"limits":{"memory":"32Mi"}}}]}}`
	if _, err := client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("patch the resize subresource: %v", err)
	}
	var cond *v1.PodCondition
	waitFor(t, "PodResizeInProgress with the error", time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		cond = podCondition(p, v1.PodResizeInProgress)
		return cond != nil && cond.Reason == v1.PodReasonError, fmt.Sprintf("%s; in progress %+v", podSummary(p), cond)
	})
	want := fmt.Sprintf(`attempting to set container "app" memory limit (%d) below current usage (`, 32<<20)
	if !strings.HasPrefix(cond.Message, want) || cond.Status != v1.ConditionTrue {
		t.Errorf("PodResizeInProgress %+v: want True with a message starting %q", cond, want)
	}
	if got, want := cgroupLimits(t, p, "app"), fmt.Sprintf("%d 20000 100000", 128<<20); got != want {
		t.Errorf("app's cgroup with the resize refused: %q, want %q unchanged", got, want)
	}
	if a := containerStatus(p, "app"); a.ContainerID != id || a.RestartCount != 0 || a.State.Running == nil ||
		a.Resources.Limits.Memory().Cmp(resource.MustParse("128Mi")) != 0 {
		t.Errorf("app with the resize refused: %s restarts %d running %v limits %v, want %s running on at 128Mi",
			a.ContainerID, a.RestartCount, a.State.Running != nil, a.Resources.Limits, id)
	}

	execIn(t, p, "app", "rm", "/dev/shm/fill")
	waitFor(t, "the limit lowered once the memory is freed", time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		a := containerStatus(p, "app")
		return a.Resources.Limits.Memory().Cmp(resource.MustParse("32Mi")) == 0 && podCondition(p, v1.PodResizeInProgress) == nil,
			fmt.Sprintf("%s; app %v; in progress %+v", podSummary(p), a.Resources, podCondition(p, v1.PodResizeInProgress))
	})
	if got, want := cgroupLimits(t, p, "app"), fmt.Sprintf("%d 20000 100000", 32<<20); got != want {
		t.Errorf("app's cgroup after the retry: %q, want %q", got, want)
	}
	if a := containerStatus(p, "app"); a.ContainerID != id || a.RestartCount != 0 {
		t.Errorf("app after the retry: %s restarts %d, want %s not restarted", a.ContainerID, a.RestartCount, id)
	}
}
