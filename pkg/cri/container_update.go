package cri

import (
	"context"
	"fmt"

	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// UpdateContainerResources changes a container's CPU and memory limits in
// the engine.
func (s *Server) UpdateContainerResources(ctx context.Context, r *runtime.UpdateContainerResourcesRequest) (*runtime.UpdateContainerResourcesResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	l := r.GetLinux()
	if l == nil {
		return &runtime.UpdateContainerResourcesResponse{}, nil
	}
	// Validate through the same mapping CreateContainer uses.
	probe := &runtime.ContainerConfig{Metadata: c.Config.GetMetadata(), Image: c.Config.GetImage(),
		Linux: &runtime.LinuxContainerConfig{Resources: l}}
	spec, err := sandbox.ContainerSpec(sandbox.ContainerInput{SandboxID: c.SandboxID, Sandbox: s.sandboxConfig(c.SandboxID), Config: probe}, s.hostInfo())
	if err != nil {
		return nil, grpcError(err)
	}
	hc := spec.HostConfig
	res := &container.Resources{CPUPeriod: hc.CPUPeriod, CPUQuota: hc.CPUQuota, CPUShares: hc.CPUShares,
		Memory: hc.Memory, MemorySwap: hc.MemorySwap, CpusetCpus: hc.CpusetCpus, CpusetMems: hc.CpusetMems}
	if res.Memory > 0 && res.MemorySwap == 0 {
		// No swap limit asked. The engine refuses a memory limit above the
		// swap limit it holds (none, for a container made without a memory
		// limit) unless that moves too: the container keeps its swap
		// allowance, or gets the engine's default for a new limit, as much
		// swap as memory.
		res.MemorySwap = 2 * res.Memory
		if svc := c.ServiceCfg; svc != nil && svc.MemLimit > 0 && svc.MemSwapLimit > 0 {
			res.MemorySwap = res.Memory + int64(svc.MemSwapLimit) - int64(svc.MemLimit)
		}
	}
	if err := s.docker.ContainerUpdate(ctx, c.ID, res); err != nil {
		return nil, grpcError(fmt.Errorf("update resources of container %s: %w", c.ID, err))
	}
	// A ContainerStatus right after must show the new values: the engine's
	// "update" event would refresh the store too, but later.
	if err := s.store.Refresh(ctx, c.ID); err != nil {
		return nil, grpcError(fmt.Errorf("read container %s back after its update: %w", c.ID, err))
	}
	return &runtime.UpdateContainerResourcesResponse{}, nil
}

// sandboxConfig is a sandbox's config, or an empty valid one if it is gone.
func (s *Server) sandboxConfig(id string) *runtime.PodSandboxConfig {
	if sb, err := s.store.Sandbox(id); err == nil {
		return sb.Config
	}
	return &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "gone", Namespace: "gone", Uid: "gone"}}
}
