package cri

import (
	"context"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/stats"
)

// ContainerStats answers from the sampler's memory (package stats).
func (s *Server) ContainerStats(ctx context.Context, r *runtime.ContainerStatsRequest) (*runtime.ContainerStatsResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	s.stats.Fresh()
	return &runtime.ContainerStatsResponse{Stats: s.stats.ContainerStats(statsContainer(c))}, nil
}

// ListContainerStats answers from the sampler's memory, for every container
// (running or not) that the filter selects, newest first.
func (s *Server) ListContainerStats(ctx context.Context, r *runtime.ListContainerStatsRequest) (*runtime.ListContainerStatsResponse, error) {
	f := r.GetFilter()
	s.stats.Fresh()
	// What the answer needs of each record, taken under the store's lock;
	// the stats are built after it.
	type sel struct {
		key recKey
		ct  stats.Container
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
		picked = append(picked, sel{recKey{c.CreatedAt, c.ID}, statsContainer(c)})
	})
	slices.SortFunc(picked, func(a, b sel) int { return newestFirst(a.key, b.key) })
	out := make([]*runtime.ContainerStats, len(picked))
	for i, p := range picked {
		out[i] = s.stats.ContainerStats(p.ct)
	}
	return &runtime.ListContainerStatsResponse{Stats: out}, nil
}
