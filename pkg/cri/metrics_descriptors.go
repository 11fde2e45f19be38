package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/stats"
)

// ListMetricDescriptors describes the cAdvisor-named metrics that
// ListPodSandboxMetrics returns (stats.MetricDescriptors).
func (s *Server) ListMetricDescriptors(ctx context.Context, _ *runtime.ListMetricDescriptorsRequest) (*runtime.ListMetricDescriptorsResponse, error) {
	return &runtime.ListMetricDescriptorsResponse{Descriptors: stats.MetricDescriptors()}, nil
}
