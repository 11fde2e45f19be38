package cri

import (
	"context"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerStats answers from the sampler's memory (stats.go).
func (s *Server) ContainerStats(ctx context.Context, r *runtime.ContainerStatsRequest) (*runtime.ContainerStatsResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	s.stats.fresh()
	return &runtime.ContainerStatsResponse{Stats: s.stats.containerStats(c)}, nil
}

// ListContainerStats answers from the sampler's memory, for every container
// (running or not) that the filter selects, newest first.
func (s *Server) ListContainerStats(ctx context.Context, r *runtime.ListContainerStatsRequest) (*runtime.ListContainerStatsResponse, error) {
	f := r.GetFilter()
	s.stats.fresh()
	// What the answer needs of each record, taken under the store's lock;
	// the stats are built after it.
	type sel struct {
		key   recKey
		cfg   *runtime.ContainerConfig
		state runtime.ContainerState
		pid   int
	}
	var picked []sel
	s.store.EachContainer(func(c containerRec) {
		if f.GetId() != "" && !strings.HasPrefix(c.ID, f.GetId()) {
			return
		}
		if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) {
			return
		}
		if !matchLabels(f.GetLabelSelector(), c.Config.GetLabels()) {
			return
		}
		picked = append(picked, sel{recKey{c.CreatedAt, c.ID}, c.Config, c.State, c.Pid})
	})
	slices.SortFunc(picked, func(a, b sel) int { return newestFirst(a.key, b.key) })
	out := make([]*runtime.ContainerStats, len(picked))
	for i, p := range picked {
		out[i] = s.stats.statsOf(p.key.id, p.cfg, p.state, p.pid)
	}
	return &runtime.ListContainerStatsResponse{Stats: out}, nil
}

// containerStats: CPU and memory while the container runs, its writable
// layer always.
func (c *statsCollector) containerStats(rec containerRec) *runtime.ContainerStats {
	return c.statsOf(rec.ID, rec.Config, rec.State, rec.Pid)
}

// statsOf builds one container's stats; a running container that started
// after the sampler's last pass is sampled on the spot (sampleNow).
func (c *statsCollector) statsOf(id string, cfg *runtime.ContainerConfig, state runtime.ContainerState, pid int) *runtime.ContainerStats {
	st := &runtime.ContainerStats{
		Attributes: &runtime.ContainerAttributes{Id: id, Metadata: cfg.GetMetadata(),
			Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations()},
		WritableLayer: c.layers.usage(id),
	}
	if state == runtime.ContainerState_CONTAINER_RUNNING {
		if smp, ok := c.sampleOf(id, pid); ok {
			st.Cpu, st.Memory = cpuUsage(smp), memoryUsage(smp)
		}
	}
	return st
}
