package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Version reports cri-compose as the runtime; kubelet shows it as
// cri-compose://<version>.
func (s *Server) Version(ctx context.Context, r *runtime.VersionRequest) (*runtime.VersionResponse, error) {
	return &runtime.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       "cri-compose",
		RuntimeVersion:    Version,
		RuntimeApiVersion: "v1",
	}, nil
}
