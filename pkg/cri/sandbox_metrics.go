package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/stats"
)

// ListPodSandboxMetrics returns, for every ready pod, the metrics that
// ListMetricDescriptors describes, built from the same samples as the stats
// RPCs (stats.Collector.Metrics); the first call samples on the spot.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, _ *runtime.ListPodSandboxMetricsRequest) (*runtime.ListPodSandboxMetricsResponse, error) {
	s.stats.FreshMetrics()
	byPod := s.containersByPod()
	var pods []stats.Pod
	for _, sb := range s.store.Sandboxes(nil) {
		pods = append(pods, statsPod(sb))
	}
	return &runtime.ListPodSandboxMetricsResponse{PodMetrics: s.stats.Metrics(ctx, pods, byPod, s.store.OOMEvents)}, nil
}
