package vk

import (
	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Pod-level resources (spec.resources): the pod's CPU and memory, which
// its containers share. kubelet enforces them in the pod cgroup it makes;
// vk-cri has no cgroup manager (its runtime may be on another host), so it
// hands them to the runtime in the sandbox's config, and cri-compose makes
// the pod cgroup. A runtime that cannot says so in its status, and such
// pods are refused at admission, as kubelet refuses them where it cannot.

// reasonPodLevelResourcesNotSupported is kubelet's admission reason.
const reasonPodLevelResourcesNotSupported = "PodLevelResourcesNotSupported"

// podSandboxResources is the pod cgroup's CPU and memory as kubelet sets
// them (ResourceConfigForPod), nil for a pod without pod-level resources:
// shares from the pod's CPU request; by QoS class, a quota from its CPU
// limit and a memory limit wherever one is declared, at pod level or on
// every container.
func podSandboxResources(pod *v1.Pod) *runtimeapi.LinuxContainerResources {
	if !resourcehelper.IsPodLevelResourcesSet(pod) {
		return nil
	}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	cpuDeclared := !pod.Spec.Resources.Limits.Cpu().IsZero()
	memDeclared := !pod.Spec.Resources.Limits.Memory().IsZero()
	if !cpuDeclared || !memDeclared {
		allCPU, allMem := true, true
		for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for i := range cs {
				allCPU = allCPU && !cs[i].Resources.Limits.Cpu().IsZero()
				allMem = allMem && !cs[i].Resources.Limits.Memory().IsZero()
			}
		}
		cpuDeclared, memDeclared = cpuDeclared || allCPU, memDeclared || allMem
	}
	r := &runtimeapi.LinuxContainerResources{CpuShares: minShares}
	switch pod.Status.QOSClass {
	case v1.PodQOSBestEffort:
		return r
	case v1.PodQOSGuaranteed:
		cpuDeclared, memDeclared = true, true
	}
	r.CpuShares = milliCPUToShares(reqs.Cpu().MilliValue())
	if cpuDeclared {
		r.CpuPeriod = quotaPeriod
		r.CpuQuota = milliCPUToQuota(limits.Cpu().MilliValue())
	}
	if memDeclared {
		r.MemoryLimitInBytes = limits.Memory().Value()
	}
	return r
}

// podLevelSupport is whether the runtime enforces pod-level resources,
// and if not why not.
type podLevelSupport struct {
	ok     bool
	whyNot string
}

func (p *Provider) notePodLevelResources(h hostInfo) {
	why := h.podLevelWhyNot
	if !h.podLevelResources && why == "" {
		why = "the container runtime does not say it enforces them"
	}
	if !h.podLevelResources {
		klog.InfoS("Pods with pod-level resources will be refused", "reason", why)
	}
	p.podLevel.Store(&podLevelSupport{ok: h.podLevelResources, whyNot: why})
}

// admitPodLevelResources refuses a pod with pod-level resources when the
// runtime cannot enforce them, with kubelet's reason: running it with
// only its containers' limits would let it use more than it asked for.
func (p *Provider) admitPodLevelResources(pod *v1.Pod) (ok bool, reason, message string) {
	if !resourcehelper.IsPodLevelResourcesSet(pod) {
		return true, "", ""
	}
	s := p.podLevel.Load()
	if s == nil {
		s = &podLevelSupport{whyNot: "the node has not read its container runtime's features yet"}
	}
	if s.ok {
		return true, "", ""
	}
	return false, reasonPodLevelResourcesNotSupported, "pod-level resources are not supported on the node: " + s.whyNot
}
