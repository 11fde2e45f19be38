package vk

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// The OOM score adjustments kubelet gives containers by QoS class, so that
// the kernel's OOM killer picks BestEffort first and Guaranteed last.
const (
	guaranteedOOMScoreAdj = -997
	besteffortOOMScoreAdj = 1000
)

// The API server's built-in priority class of node-critical pods, and the
// priority from which a pod counts as critical (neither is exported by a
// library vk-cri can import).
const (
	systemNodeCritical     = "system-node-critical"
	systemCriticalPriority = 2_000_000_000
)

// oomScoreAdj is kubelet's OOM score adjustment for container c of pod
// (pod as allocated), on a node of memCapacity bytes. A Burstable
// container gets 1000 less its memory request's share of the node, per
// mille, kept strictly between Guaranteed's and BestEffort's; a sidecar no
// more than the pod's regular container with the smallest request, so it
// is not killed before what it serves. Pod-level memory requests left over
// by the containers are shared among them. A pod with no QoS class (one
// the API server did not create, which sets it at creation) keeps the
// runtime's default.
func oomScoreAdj(pod *v1.Pod, c *v1.Container, memCapacity int64) int64 {
	if isNodeCritical(pod) {
		return guaranteedOOMScoreAdj
	}
	switch pod.Status.QOSClass {
	case v1.PodQOSGuaranteed:
		return guaranteedOOMScoreAdj
	case v1.PodQOSBestEffort:
		return besteffortOOMScoreAdj
	case v1.PodQOSBurstable:
	default:
		return 0
	}
	if memCapacity <= 0 {
		return besteffortOOMScoreAdj - 1 // capacity unknown: as if the request were none of it
	}
	var share int64
	if resourcehelper.IsPodLevelRequestsSet(pod) {
		share = podMemoryLeftPerContainer(pod)
	}
	adj := 1000 - 1000*(c.Resources.Requests.Memory().Value()+share)/memCapacity
	if isSidecar(c) && isInitContainer(pod, c.Name) && len(pod.Spec.Containers) > 0 {
		least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
		for i := range pod.Spec.Containers[1:] {
			least = min(least, pod.Spec.Containers[i+1].Resources.Requests.Memory().Value())
		}
		adj = min(adj, 1000-1000*(least+share)/memCapacity)
	}
	switch {
	case adj < 1000+guaranteedOOMScoreAdj:
		return 1000 + guaranteedOOMScoreAdj
	case adj == besteffortOOMScoreAdj:
		return besteffortOOMScoreAdj - 1
	}
	return adj
}

// isNodeCritical is a pod of the system-node-critical class: kubelet
// protects it as Guaranteed whatever its requests.
func isNodeCritical(pod *v1.Pod) bool {
	return pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority &&
		pod.Spec.PriorityClassName == systemNodeCritical
}

// podMemoryLeftPerContainer is the pod-level memory request that no
// container's request takes up, split evenly among all the containers.
func podMemoryLeftPerContainer(pod *v1.Pod) int64 {
	podReq := pod.Spec.Resources.Requests.Memory().Value()
	if podReq == 0 {
		return 0
	}
	reqs := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	used := reqs.Memory().Value()
	return max(podReq-used, 0) / int64(len(pod.Spec.Containers)+len(pod.Spec.InitContainers))
}
