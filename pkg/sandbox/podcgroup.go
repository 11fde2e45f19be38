package sandbox

import (
	"fmt"
	"path"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodCgroup is the cgroup parent cri-compose makes for a sandbox that asks
// for pod-level resources (LinuxPodSandboxConfig.resources) and names no
// cgroup parent of its own, "" when it needs none. A kubelet makes its
// pods' cgroups itself and names them; a node agent without a cgroup
// manager (vk-cri) leaves that to the runtime. Every container of the pod
// then runs below it, so the pod's limits hold for all of them together.
// An engine whose pods' cgroups cri-compose cannot make refuses such a
// sandbox with ErrUnsupported and the reason.
func PodCgroup(cfg *runtime.PodSandboxConfig, h Host) (string, error) {
	lx := cfg.GetLinux()
	if lx.GetCgroupParent() != "" || !AsksResources(lx.GetResources()) {
		return "", nil
	}
	if h.PodCgroupRoot == "" {
		why := h.PodCgroupsWhyNot
		if why == "" {
			why = "this engine's pods cannot have cgroups of their own"
		}
		return "", fmt.Errorf("%w: pod-level resources: %s", ErrUnsupported, why)
	}
	return path.Join(h.PodCgroupRoot, ProjectName(cfg.GetMetadata())), nil
}

// IsPodCgroup says whether parent is a pod cgroup cri-compose made
// (PodCgroup), to be removed with its pod.
func IsPodCgroup(parent string, h Host) bool {
	return h.PodCgroupRoot != "" && strings.HasPrefix(parent, h.PodCgroupRoot+"/")
}

// AsksResources says whether r limits or weighs anything.
func AsksResources(r *runtime.LinuxContainerResources) bool {
	return r.GetCpuShares() > 0 || r.GetCpuQuota() > 0 || r.GetMemoryLimitInBytes() > 0
}
