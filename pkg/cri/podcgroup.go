package cri

import (
	"fmt"

	"github.com/opencontainers/cgroups"
	cgmanager "github.com/opencontainers/cgroups/manager"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pod cgroups: a sandbox that asks for pod-level resources and names no
// cgroup parent gets one cri-compose makes (sandbox.PodCgroup), below
// podCgroupRoot, with the pod's limits; the engine then puts the infra
// container and every container of the pod below it, as kubelet's pod
// cgroups hold a pod's containers. cri-compose writes those cgroups
// itself, so the engine must be on this host and place its containers
// by cgroupfs paths (its cgroupfs driver): a systemd driver takes slice
// names, whose limits only systemd may set.
const podCgroupRoot = "/cri-compose"

// podCgroups says whether cri-compose can make pod cgroups for this
// engine: the root it makes them below, else "" and why not.
func podCgroups(local bool, driver string) (root, whyNot string) {
	switch {
	case !local:
		return "", "the engine is on another host, whose cgroups cri-compose cannot write"
	case driver != "" && driver != "cgroupfs":
		return "", fmt.Sprintf("the engine's cgroup driver is %s; cri-compose makes pod cgroups for the cgroupfs driver only", driver)
	}
	m, err := cgmanager.New(&cgroups.Cgroup{Path: podCgroupRoot, Resources: &cgroups.Resources{SkipDevices: true}})
	if err == nil {
		err = m.Apply(-1) // makes the folder in every hierarchy, joins nothing
	}
	if err != nil {
		return "", fmt.Sprintf("cri-compose cannot make cgroups here: %v", err)
	}
	return podCgroupRoot, ""
}

// makePodCgroup makes (or updates) the pod cgroup at parent with r's
// CPU and memory limits.
func makePodCgroup(parent string, r *runtime.LinuxContainerResources) error {
	res := &cgroups.Resources{
		SkipDevices: true, // the engine sets each container's device rules
		Memory:      r.GetMemoryLimitInBytes(),
		CpuQuota:    r.GetCpuQuota(),
		CpuPeriod:   uint64(max(r.GetCpuPeriod(), 0)),
	}
	if shares := uint64(max(r.GetCpuShares(), 0)); cgroups.IsCgroup2UnifiedMode() {
		res.CpuWeight = cgroups.ConvertCPUSharesToCgroupV2Value(shares)
	} else {
		res.CpuShares = shares
	}
	if res.CpuQuota > 0 && res.CpuPeriod == 0 {
		res.CpuPeriod = 100000 // the kernel's default period, which a quota is reckoned in
	}
	m, err := cgmanager.New(&cgroups.Cgroup{Path: parent, Resources: res})
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", parent, err)
	}
	if err := m.Apply(-1); err != nil {
		return fmt.Errorf("make pod cgroup %s: %w", parent, err)
	}
	if err := m.Set(res); err != nil {
		return fmt.Errorf("set the limits of pod cgroup %s: %w", parent, err)
	}
	return nil
}

// removePodCgroup removes the pod cgroup at parent, once the engine has
// removed the containers below it. Removing one that is gone succeeds.
func removePodCgroup(parent string) error {
	m, err := cgmanager.New(&cgroups.Cgroup{Path: parent, Resources: &cgroups.Resources{SkipDevices: true}})
	if err == nil {
		err = m.Destroy()
	}
	if err != nil {
		return fmt.Errorf("remove pod cgroup %s: %w", parent, err)
	}
	return nil
}
