package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListMetricDescriptors describes the cAdvisor-named metrics that
// ListPodSandboxMetrics returns (stats.Collector.MetricDescriptors).
func (s *Server) ListMetricDescriptors(ctx context.Context, _ *runtime.ListMetricDescriptorsRequest) (*runtime.ListMetricDescriptorsResponse, error) {
	return &runtime.ListMetricDescriptorsResponse{Descriptors: s.stats.MetricDescriptors(ctx)}, nil
}
