package cri

import (
	"context"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats answers from the sampler's memory (stats.go).
func (s *Server) ContainerStats(ctx context.Context, r *runtime.ContainerStatsRequest) (*runtime.ContainerStatsResponse, error) {
	c, err := s.store.container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	s.stats.fresh()
	return &runtime.ContainerStatsResponse{Stats: s.stats.containerStats(c)}, nil
}

// ListContainerStats answers from the sampler's memory, for every container
// (running or not) that the filter selects.
func (s *Server) ListContainerStats(ctx context.Context, r *runtime.ListContainerStatsRequest) (*runtime.ListContainerStatsResponse, error) {
	f := r.GetFilter()
	s.stats.fresh()
	var out []*runtime.ContainerStats
	for _, c := range s.store.listContainers() {
		if f.GetId() != "" && !strings.HasPrefix(c.ID, f.GetId()) {
			continue
		}
		if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) {
			continue
		}
		if !matchLabels(f.GetLabelSelector(), c.Config.GetLabels()) {
			continue
		}
		out = append(out, s.stats.containerStats(c))
	}
	return &runtime.ListContainerStatsResponse{Stats: out}, nil
}

// containerStats: CPU and memory while the container runs, its writable
// layer always.
func (c *statsCollector) containerStats(rec containerRec) *runtime.ContainerStats {
	st := &runtime.ContainerStats{
		Attributes: &runtime.ContainerAttributes{Id: rec.ID, Metadata: rec.Config.GetMetadata(),
			Labels: rec.Config.GetLabels(), Annotations: rec.Config.GetAnnotations()},
		WritableLayer: c.layers.usage(rec.ID),
	}
	if rec.State == runtime.ContainerState_CONTAINER_RUNNING {
		if smp, ok := c.sample(rec.ID); ok {
			st.Cpu, st.Memory = cpuUsage(smp), memoryUsage(smp)
		}
	}
	return st
}
