package vk

import (
	"context"
	"errors"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func quantities(cpu, mem string) v1.ResourceList {
	l := v1.ResourceList{}
	if cpu != "" {
		l[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// TestResizePlan: a running container whose allocated resources differ
// from what the runtime reports is updated in place, or restarted where
// its resizePolicy says RestartContainer for a resource that changed; a
// container made before vk-cri resized in place (no hash without
// resources) is restarted for the new spec, as before.
func TestResizePlan(t *testing.T) {
	was := v1.ResourceRequirements{Requests: quantities("100m", "32Mi"), Limits: quantities("200m", "64Mi")}
	moreMem := v1.ResourceRequirements{Requests: quantities("100m", "32Mi"), Limits: quantities("200m", "128Mi")}
	moreCPU := v1.ResourceRequirements{Requests: quantities("150m", "32Mi"), Limits: quantities("300m", "64Mi")}
	moreMemReq := v1.ResourceRequirements{Requests: quantities("100m", "48Mi"), Limits: quantities("200m", "64Mi")}
	restartMem := []v1.ContainerResizePolicy{{ResourceName: v1.ResourceMemory, RestartPolicy: v1.RestartContainer}}
	madeWith := func(memReq int64) func(c *criContainer) { return func(c *criContainer) { c.memoryRequest = &memReq } }
	for _, tc := range []struct {
		name   string
		now    v1.ResourceRequirements
		policy []v1.ContainerResizePolicy
		cur    func(c *criContainer)
		want   []string
	}{
		{name: "as allocated", now: was, want: []string{"syncContainers"}},
		{name: "memory, NotRequired", now: moreMem, want: []string{"syncContainers", "resize a"}},
		{name: "cpu, NotRequired", now: moreCPU, want: []string{"syncContainers", "resize a"}},
		{name: "memory, RestartContainer", now: moreMem, policy: restartMem, want: []string{"syncContainers", "kill a spec grace=7 msg="}},
		{name: "cpu, memory RestartContainer", now: moreCPU, policy: restartMem, want: []string{"syncContainers", "resize a"}},
		// No cgroup v1 value follows a memory request: what the container
		// was made with, or last resized to, tells.
		{name: "memory request, RestartContainer", now: moreMemReq, policy: restartMem, cur: madeWith(32 << 20),
			want: []string{"syncContainers", "kill a spec grace=7 msg="}},
		{name: "memory request, NotRequired", now: moreMemReq, cur: madeWith(32 << 20), want: []string{"syncContainers", "resize a"}},
		{name: "memory request resized already", now: moreMemReq, policy: restartMem, cur: madeWith(48 << 20), want: []string{"syncContainers"}},
		{name: "memory request unknown", now: moreMemReq, policy: restartMem, want: []string{"syncContainers"}},
		{name: "the runtime reports no resources", now: moreMem, cur: func(c *criContainer) { c.resources = nil }, want: []string{"syncContainers"}},
		{name: "made before in-place resize", now: moreMem, cur: func(c *criContainer) { c.hashNoResources = "" },
			want: []string{"syncContainers", "kill a spec grace=7 msg="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.InitContainers = nil
			pod.Spec.Containers = pod.Spec.Containers[:1]
			old := pod.Spec.Containers[0].DeepCopy()
			old.Resources, old.ResizePolicy = was, tc.policy
			c := &pod.Spec.Containers[0]
			c.Resources, c.ResizePolicy = tc.now, tc.policy
			cur := &criContainer{id: "a-0", name: "a", sandboxID: "sb1", state: runtimeapi.ContainerState_CONTAINER_RUNNING,
				hash: containerHash(old), hashNoResources: containerHashNoResources(old), resources: linuxResources(old)}
			if tc.cur != nil {
				tc.cur(cur)
			}
			obs := &observation{
				sandboxes:  []*runtimeapi.PodSandbox{{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY}},
				sandbox:    &runtimeapi.PodSandboxStatus{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY},
				containers: map[string][]*criContainer{"a": {cur}},
			}
			got := describe(computePodActions(planInput{pod: pod, obs: obs, probes: fakeProbes{}, backoff: nil}))
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStatusResources: the status shows the allocated value wherever the
// runtime's maps back to it, else the one the runtime's stands for, and
// never nil.
func TestStatusResources(t *testing.T) {
	c := &v1.Container{Name: "a", Resources: v1.ResourceRequirements{Requests: quantities("100m", "32Mi"), Limits: quantities("333m", "64Mi")}}
	got := statusResources(c, linuxResources(c))
	if got.Limits.Cpu().String() != "333m" || got.Requests.Cpu().String() != "100m" || got.Limits.Memory().String() != "64Mi" {
		t.Errorf("as allocated: %v, want the allocation", got)
	}
	r := linuxResources(c)
	r.CpuQuota, r.CpuShares, r.MemoryLimitInBytes = 50000, 512, 128<<20 // not yet resized to c
	got = statusResources(c, r)
	if got.Limits.Cpu().MilliValue() != 500 || got.Requests.Cpu().MilliValue() != 500 || got.Limits.Memory().Value() != 128<<20 ||
		got.Requests.Memory().String() != "32Mi" {
		t.Errorf("running with other values: %v, want limits 500m 128Mi, requests 500m and the allocated 32Mi", got)
	}
	if got := statusResources(&v1.Container{Name: "b"}, &runtimeapi.LinuxContainerResources{CpuShares: 2}); got == nil || len(got.Limits)+len(got.Requests) != 0 {
		t.Errorf("no resources: %v, want empty and not nil", got)
	}
}

// TestResizeFits: kubelet's answers to a resize, against the node's
// allocatable and the other pods' allocations.
func TestResizeFits(t *testing.T) {
	p := &Provider{workers: map[types.UID]*podWorker{}}
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi")}
	worker := func(uid, cpu, mem string) *podWorker {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Resources: v1.ResourceRequirements{Requests: quantities(cpu, mem)}}}}}
		w := &podWorker{p: p, spec: pod}
		p.workers[pod.UID] = w
		return w
	}
	self := worker("self", "100m", "100Mi")
	worker("other", "1500m", "500Mi")
	done := worker("done", "1", "1Gi")
	done.state = podTerminal // holds nothing of the node any more
	ask := func(cpu, mem string) (string, string) {
		pod := self.spec.DeepCopy()
		pod.Spec.Containers[0].Resources.Requests = quantities(cpu, mem)
		return p.fits(pod, self)
	}
	if reason, _ := ask("1", "1Gi"); reason != "" {
		t.Errorf("no allocatable known: %s, want no check", reason)
	}
	p.objects = &richObjects{fakeObjects: &fakeObjects{}, alloc: alloc}
	for _, tc := range []struct{ cpu, mem, reason, msg string }{
		{"500m", "500Mi", "", ""},
		{"3", "2Gi", v1.PodReasonInfeasible, "Node didn't have enough capacity: memory, requested: 2147483648, capacity: 1073741824"},
		{"3", "1Gi", v1.PodReasonInfeasible, "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"},
		{"600m", "100Mi", v1.PodReasonDeferred, "Node didn't have enough resource: cpu, requested: 600, used: 1500, capacity: 2000"},
		{"100m", "600Mi", v1.PodReasonDeferred, "Node didn't have enough resource: memory, requested: 629145600, used: 524288000, capacity: 1073741824"},
	} {
		reason, msg := ask(tc.cpu, tc.mem)
		if reason != tc.reason || msg != tc.msg {
			t.Errorf("cpu %s memory %s: %s %q, want %s %q", tc.cpu, tc.mem, reason, msg, tc.reason, tc.msg)
		}
	}
}

// statsRuntime reports a container's memory working set, or fails.
type statsRuntime struct {
	internalapi.RuntimeService
	workingSet uint64
	fail       error
	calls      int
}

func (r *statsRuntime) ContainerStats(context.Context, string) (*runtimeapi.ContainerStats, error) {
	r.calls++
	if r.fail != nil {
		return nil, r.fail
	}
	return &runtimeapi.ContainerStats{Memory: &runtimeapi.MemoryUsage{WorkingSetBytes: &runtimeapi.UInt64Value{Value: r.workingSet}}}, nil
}

// TestBelowUsage: a memory limit is lowered only to above what the
// container uses; raising it, or no limit, reads no usage.
func TestBelowUsage(t *testing.T) {
	const mi = 1 << 20
	rt := &statsRuntime{workingSet: 50 * mi}
	w := &podWorker{p: &Provider{rt: &Runtime{RuntimeService: rt}}}
	a := func(cur int64) containerAction {
		c := &v1.Container{Name: "app"}
		return containerAction{c: c, cur: &criContainer{id: "c1", resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: cur}}}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		cur, limit int64
		fail       error
		want       string
		reads      bool
	}{
		{"lowered below usage", 128 * mi, 32 * mi, nil, `attempting to set container "app" memory limit (33554432) below current usage (52428800)`, true},
		{"lowered above usage", 128 * mi, 64 * mi, nil, "", true},
		{"from no limit to below usage", 0, 32 * mi, nil, `attempting to set container "app" memory limit (33554432) below current usage (52428800)`, true},
		{"raised", 64 * mi, 128 * mi, nil, "", false},
		{"limit removed", 64 * mi, 0, nil, "", false},
		{"usage unreadable", 128 * mi, 32 * mi, errors.New("no stats"), "", true},
	} {
		rt.calls, rt.fail = 0, tc.fail
		if got := w.belowUsage(ctx, a(tc.cur), tc.limit); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
		if read := rt.calls > 0; read != tc.reads {
			t.Errorf("%s: usage read %v, want %v", tc.name, read, tc.reads)
		}
	}
}
