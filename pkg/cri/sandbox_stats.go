package cri

import (
	"context"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStats answers from the sampler's memory (package stats).
func (s *Server) PodSandboxStats(ctx context.Context, r *runtime.PodSandboxStatsRequest) (*runtime.PodSandboxStatsResponse, error) {
	sb, err := s.store.Sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, grpcError(err)
	}
	s.stats.Fresh()
	return &runtime.PodSandboxStatsResponse{Stats: s.stats.PodStats(statsPod(sb), statsContainers(s.store.ContainersOf(sb.ID)))}, nil
}

// ListPodSandboxStats answers from the sampler's memory for every sandbox
// that the filter selects.
func (s *Server) ListPodSandboxStats(ctx context.Context, r *runtime.ListPodSandboxStatsRequest) (*runtime.ListPodSandboxStatsResponse, error) {
	f := r.GetFilter()
	s.stats.Fresh()
	byPod := s.containersByPod()
	var out []*runtime.PodSandboxStats
	for _, sb := range s.store.Sandboxes(nil) {
		if f.GetId() != "" && !strings.HasPrefix(sb.ID, f.GetId()) {
			continue
		}
		if !matchLabels(f.GetLabelSelector(), sb.Config.GetLabels()) {
			continue
		}
		out = append(out, s.stats.PodStats(statsPod(sb), byPod[sb.ID]))
	}
	return &runtime.ListPodSandboxStatsResponse{Stats: out}, nil
}
