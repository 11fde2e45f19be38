package vk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// In-place resize, as kubelet does it. A pod's spec resources are what
// is asked for; its allocated resources are what the node granted, kept
// per container in the pod's directory (so a restart of vk-cri grants
// nothing twice); the runtime's ContainerStatus.resources are what the
// containers run with. Each pass allocates a resize that fits the node's
// allocatable beside the other pods' allocations (else PodResizePending:
// Infeasible when it could never fit, Deferred when it may later), then
// drives the running containers to their allocation: through
// UpdateContainerResources, or by a restart where the container's
// resizePolicy says RestartContainer for a resource that changed. Until
// they run with it, PodResizeInProgress is True.

// allocationFile holds a pod's allocated resources, by container name.
const allocationFile = "allocated.json"

// allocation is what the node granted one pod.
type allocation map[string]v1.ResourceRequirements

// actuatedFile holds the memory requests of a pod's running containers
// as resized in place, by container id (what a container was made with is
// in its annotations).
const actuatedFile = "actuated.json"

// resizeState is the worker's resize bookkeeping, under its mu.
type resizeState struct {
	alloc allocation // nil until loaded
	// actuated is actuatedFile's content (nil until loaded).
	actuated map[string]int64
	// pending is the PodResizePending condition (nil: none).
	pending *v1.PodCondition
	// failed is why the last UpdateContainerResources failed ("": none).
	failed string
}

// resizable are the containers whose resources may change in place: the
// app containers and the sidecars (a regular init container's are
// immutable, and ephemeral containers have none).
func resizable(pod *v1.Pod) []*v1.Container {
	var out []*v1.Container
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; isSidecar(c) {
			out = append(out, c)
		}
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

func specAllocation(pod *v1.Pod) allocation {
	a := allocation{}
	for _, c := range resizable(pod) {
		a[c.Name] = *c.Resources.DeepCopy()
	}
	return a
}

// withAllocation is pod with its containers' resources as allocated.
func withAllocation(pod *v1.Pod, a allocation) *v1.Pod {
	out := pod.DeepCopy()
	for _, c := range resizable(out) {
		if r, ok := a[c.Name]; ok {
			c.Resources = *r.DeepCopy()
		}
	}
	return out
}

func (w *podWorker) loadAllocation(pod *v1.Pod) allocation {
	b, err := os.ReadFile(filepath.Join(podDir(w.p.cfg.StateDir, pod.UID), allocationFile))
	if err == nil {
		var a allocation
		if err = json.Unmarshal(b, &a); err == nil {
			return a
		}
	}
	if !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Reading the pod's allocated resources; allocating its spec", "pod", klog.KObj(pod))
	}
	// As admitted; kept at once, so that a resize made while vk-cri is
	// down is checked as one when it is back.
	a := specAllocation(pod)
	if err := w.saveAllocation(pod, a); err != nil {
		klog.ErrorS(err, "Saving the pod's allocated resources", "pod", klog.KObj(pod))
	}
	return a
}

func (w *podWorker) saveAllocation(pod *v1.Pod, a allocation) error {
	return w.savePodFile(pod, allocationFile, a)
}

// savePodFile writes v as JSON to the file name in the pod's folder, whole
// or not at all (a new file renamed over the old).
func (w *podWorker) savePodFile(pod *v1.Pod, name string, v any) error {
	dir := podDir(w.p.cfg.StateDir, pod.UID)
	if err := closedDir(dir, privateDirPerm); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name)
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// allocatedPod is the pod with what the node granted it, allocating a
// resize first when it fits (the pod must be active: nothing is granted
// to a pod that is finishing).
func (w *podWorker) allocatedPod(pod *v1.Pod, active bool) *v1.Pod {
	w.mu.Lock()
	a := w.resize.alloc
	w.mu.Unlock()
	if a == nil {
		a = w.loadAllocation(pod)
		w.mu.Lock()
		w.resize.alloc = a
		w.mu.Unlock()
	}
	want := specAllocation(pod)
	if !active || equality.Semantic.DeepEqual(a, want) {
		w.setPending(pod, nil)
		return withAllocation(pod, a)
	}
	if reason, msg := w.p.fits(pod, w); reason != "" {
		w.setPending(pod, &v1.PodCondition{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: reason, Message: msg})
		return withAllocation(pod, a)
	}
	if err := w.saveAllocation(pod, want); err != nil {
		// Not granted: granting what a restart would forget could
		// over-commit the node.
		klog.ErrorS(err, "Saving the pod's allocated resources; will retry", "pod", klog.KObj(pod))
		w.wakeAfter(retryAfterError)
		return withAllocation(pod, a)
	}
	klog.InfoS("Pod resize allocated", "pod", klog.KObj(pod), "generation", pod.Generation)
	w.p.podEvent(pod, false, "ResizeStarted", fmt.Sprintf("Pod resize started: %s", allocationString(want)))
	w.mu.Lock()
	w.resize.alloc, w.resize.failed = want, ""
	w.mu.Unlock()
	w.setPending(pod, nil)
	return withAllocation(pod, want)
}

func allocationString(a allocation) string {
	b, _ := json.Marshal(a)
	return string(b)
}

func (w *podWorker) setPending(pod *v1.Pod, c *v1.PodCondition) {
	w.mu.Lock()
	prev := w.resize.pending
	w.resize.pending = c
	w.mu.Unlock()
	if c != nil && (prev == nil || prev.Reason != c.Reason || prev.Message != c.Message) {
		klog.InfoS("Pod resize pending", "pod", klog.KObj(pod), "reason", c.Reason, "message", c.Message)
		w.p.podEvent(pod, true, "Resize"+c.Reason, c.Message)
	}
}

// allocatedRequests is what the pod holds of the node (none once it is
// finishing, or refused).
func (w *podWorker) allocatedRequests() v1.ResourceList {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != podActive || w.rejected != nil {
		return nil
	}
	a := w.resize.alloc
	if a == nil {
		a = specAllocation(w.spec)
	}
	return resourcehelper.PodRequests(withAllocation(w.spec, a), resourcehelper.PodResourcesOptions{})
}

// fits says whether pod's spec resources may be allocated, as kubelet's
// allocation manager: Infeasible when more than the node's allocatable,
// Deferred when more than what the other pods leave of it. "" when it fits.
func (p *Provider) fits(pod *v1.Pod, self *podWorker) (reason, msg string) {
	alloc := allocatableOf(p.objects)
	if alloc == nil {
		return "", "" // no node object (a runtime-only provider): nothing to check against
	}
	req := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	memReq, memCap := req.Memory().Value(), alloc.Memory().Value()
	cpuReq, cpuCap := req.Cpu().MilliValue(), alloc.Cpu().MilliValue()
	switch {
	case memReq > memCap:
		return v1.PodReasonInfeasible, fmt.Sprintf("Node didn't have enough capacity: %s, requested: %d, capacity: %d", v1.ResourceMemory, memReq, memCap)
	case cpuReq > cpuCap:
		return v1.PodReasonInfeasible, fmt.Sprintf("Node didn't have enough capacity: %s, requested: %d, capacity: %d", v1.ResourceCPU, cpuReq, cpuCap)
	}
	p.mu.Lock()
	others := make([]*podWorker, 0, len(p.workers))
	for _, w := range p.workers {
		if w != self {
			others = append(others, w)
		}
	}
	p.mu.Unlock()
	var cpuUsed, memUsed int64
	for _, w := range others {
		r := w.allocatedRequests()
		cpuUsed += r.Cpu().MilliValue()
		memUsed += r.Memory().Value()
	}
	switch {
	case cpuUsed+cpuReq > cpuCap:
		return v1.PodReasonDeferred, fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", v1.ResourceCPU, cpuReq, cpuUsed, cpuCap)
	case memUsed+memReq > memCap:
		return v1.PodReasonDeferred, fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", v1.ResourceMemory, memReq, memUsed, memCap)
	}
	return "", ""
}

// resizeDiff is what of a running container differs from its allocation,
// as the runtime reports it (both false when the runtime reports nothing),
// and its memory request as last actuated (kubelet restarts a container
// whose resizePolicy says so for a memory request that changed, though
// no cgroup v1 value follows it).
func resizeDiff(c *v1.Container, cur *criContainer) (cpu, mem bool) {
	if cur.resources == nil {
		return false, false
	}
	want, got := linuxResources(c), cur.resources
	cpu = want.CpuShares != got.CpuShares || max(want.CpuQuota, 0) != max(got.CpuQuota, 0)
	mem = want.MemoryLimitInBytes != max(got.MemoryLimitInBytes, 0) ||
		cur.memoryRequest != nil && *cur.memoryRequest != c.Resources.Requests.Memory().Value()
	return cpu, mem
}

// restartsFor says whether c's resizePolicy restarts it for a change of
// resource r (NotRequired by default).
func restartsFor(c *v1.Container, r v1.ResourceName) bool {
	for _, p := range c.ResizePolicy {
		if p.ResourceName == r {
			return p.RestartPolicy == v1.RestartContainer
		}
	}
	return false
}

// resizeAction brings running container cur to c's allocated resources:
// in place, or by a restart when its resizePolicy asks for one.
func (in *planInput) resizeAction(c *v1.Container, init bool, cur *criContainer) *containerAction {
	cpu, mem := resizeDiff(c, cur)
	if !cpu && !mem {
		return nil
	}
	if cpu && restartsFor(c, v1.ResourceCPU) || mem && restartsFor(c, v1.ResourceMemory) {
		return &containerAction{kind: actionKill, c: c, init: init, cur: cur, kill: killSpecChanged, grace: podGrace(in.pod)}
	}
	return &containerAction{kind: actionResize, c: c, init: init, cur: cur}
}

// statusResources is what container c (as allocated) runs with, as
// kubelet reports it: the allocated value wherever the runtime's maps
// back to it (so the status reads as the spec once a resize took), else
// the one the runtime's value stands for.
func statusResources(c *v1.Container, r *runtimeapi.LinuxContainerResources) *v1.ResourceRequirements {
	out := c.Resources.DeepCopy()
	if r == nil {
		return out
	}
	want := linuxResources(c)
	set := func(l *v1.ResourceList, name v1.ResourceName, q *resource.Quantity) {
		if *l == nil {
			*l = v1.ResourceList{}
		}
		(*l)[name] = *q
	}
	if r.CpuQuota > 0 && r.CpuPeriod > 0 && r.CpuQuota != want.CpuQuota {
		set(&out.Limits, v1.ResourceCPU, resource.NewMilliQuantity(r.CpuQuota*1000/r.CpuPeriod, resource.DecimalSI))
	}
	if r.MemoryLimitInBytes > 0 && r.MemoryLimitInBytes != want.MemoryLimitInBytes {
		set(&out.Limits, v1.ResourceMemory, resource.NewQuantity(r.MemoryLimitInBytes, resource.BinarySI))
	}
	if r.CpuShares > 2 && r.CpuShares != want.CpuShares {
		set(&out.Requests, v1.ResourceCPU, resource.NewMilliQuantity(r.CpuShares*1000/1024, resource.DecimalSI))
	}
	return out
}

// resizeContainer updates running container a.cur to a.c's allocated
// resources. A failure (a memory limit below what it uses, say) is
// reported in PodResizeInProgress and tried again; it fails no pass.
func (w *podWorker) resizeContainer(ctx context.Context, pod *v1.Pod, a containerAction) bool {
	// As kubelet, the OOM score adjustment goes too: a Burstable
	// container's follows its memory request.
	want := withOOMScoreAdj(linuxResources(a.c), oomScoreAdj(pod, a.c, w.p.memCapacity.Load()))
	failed := w.belowUsage(ctx, a, want.MemoryLimitInBytes)
	var err error
	if failed != "" {
		err = errors.New(failed)
	} else if err = w.p.rt.UpdateContainerResources(ctx, a.cur.id, &runtimeapi.ContainerResources{Linux: want}); err != nil {
		failed = fmt.Sprintf("updating resources of container %s: %v", a.c.Name, err)
	}
	w.mu.Lock()
	w.resize.failed = failed
	w.mu.Unlock()
	if err != nil {
		klog.ErrorS(err, "Resizing a container; will retry", "pod", klog.KObj(pod), "container", a.c.Name)
		w.wakeAfter(backoffInitial)
		return false
	}
	w.noteActuated(pod, a.cur.id, a.c.Resources.Requests.Memory().Value())
	klog.InfoS("Container resized in place", "pod", klog.KObj(pod), "container", a.c.Name, "id", a.cur.id)
	return true
}

// belowUsage says why a memory limit decrease of running container a.cur
// to limit is not made, as kubelet checks before one: the new limit is
// below what the container uses now. cgroup v1 would refuse such a limit,
// and v2 would OOM-kill the container. Best effort, as kubelet's: usage
// read a moment before the update may grow past the limit meanwhile, and
// a usage that cannot be read lets the runtime try.
func (w *podWorker) belowUsage(ctx context.Context, a containerAction, limit int64) string {
	cur := a.cur.resources.GetMemoryLimitInBytes()
	if limit <= 0 || cur > 0 && limit >= cur {
		return "" // no limit, or not lowered
	}
	st, err := w.p.rt.ContainerStats(ctx, a.cur.id)
	if err != nil {
		klog.V(2).InfoS("Reading a container's memory usage before lowering its limit", "container", a.cur.id, "err", err)
		return ""
	}
	used := st.GetMemory().GetWorkingSetBytes().GetValue()
	if used <= uint64(limit) {
		return ""
	}
	return fmt.Sprintf("attempting to set container %q memory limit (%d) below current usage (%d)", a.c.Name, limit, used)
}

// allocatedContainer is c with the resources the node granted it.
func (in *statusInput) allocatedContainer(c *v1.Container) *v1.Container {
	r, ok := in.allocated[c.Name]
	if !ok {
		return c
	}
	out := c.DeepCopy()
	out.Resources = *r.DeepCopy()
	return out
}

// resizeConditions are PodResizePending and PodResizeInProgress, as
// kubelet sets them: in progress while a running container's resources
// differ from its allocation.
func (in *statusInput) resizeConditions() []v1.PodCondition {
	var out []v1.PodCondition
	if in.resizePending != nil {
		out = append(out, *in.resizePending)
	}
	for _, c := range resizable(in.pod) {
		l := in.containers[c.Name]
		if len(l) == 0 || in.sandbox == nil || l[0].sandboxID != in.sandbox.id || l[0].state != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if cpu, mem := resizeDiff(in.allocatedContainer(c), l[0]); cpu || mem {
			cond := v1.PodCondition{Type: v1.PodResizeInProgress, Status: v1.ConditionTrue}
			if in.resizeFailed != "" {
				cond.Reason, cond.Message = v1.PodReasonError, in.resizeFailed
			}
			return append(out, cond)
		}
	}
	return out
}

// retryDeferredResize wakes the worker when a resize of its pod waits for
// room on the node.
func (w *podWorker) retryDeferredResize() {
	w.mu.Lock()
	pending := w.resize.pending != nil
	w.mu.Unlock()
	if pending {
		w.poke()
	}
}

// actuatedMemoryRequest is the memory request container id runs with: as
// last resized in place, else as made (annotation; nil, unknown, for a
// container of an older vk-cri).
func (w *podWorker) actuatedMemoryRequest(id, annotation string) *int64 {
	w.loadActuated()
	w.mu.Lock()
	v, ok := w.resize.actuated[id]
	w.mu.Unlock()
	if ok {
		return &v
	}
	if v, err := strconv.ParseInt(annotation, 10, 64); err == nil {
		return &v
	}
	return nil
}

// loadActuated reads actuatedFile once.
func (w *podWorker) loadActuated() {
	w.mu.Lock()
	loaded := w.resize.actuated != nil
	w.mu.Unlock()
	if loaded {
		return
	}
	a := map[string]int64{}
	b, err := os.ReadFile(filepath.Join(podDir(w.p.cfg.StateDir, w.pod().UID), actuatedFile))
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Reading the memory requests resized in place; taking the containers' own", "pod", klog.KObj(w.pod()))
	}
	w.mu.Lock()
	if w.resize.actuated == nil {
		w.resize.actuated = a
	}
	w.mu.Unlock()
}

// noteActuated records that container id now runs with memory request
// memReq, kept in the pod's folder so that a restart of vk-cri restarts
// nothing for a resize already made.
func (w *podWorker) noteActuated(pod *v1.Pod, id string, memReq int64) {
	w.loadActuated()
	w.mu.Lock()
	if v, ok := w.resize.actuated[id]; ok && v == memReq {
		w.mu.Unlock()
		return
	}
	w.resize.actuated[id] = memReq
	snapshot := maps.Clone(w.resize.actuated)
	w.mu.Unlock()
	if err := w.savePodFile(pod, actuatedFile, snapshot); err != nil {
		klog.ErrorS(err, "Saving a memory request resized in place", "pod", klog.KObj(pod), "container", id)
	}
}
