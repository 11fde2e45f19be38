package cri

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CheckpointContainer is not offered: the engine's checkpoints need its
// experimental mode and CRIU on the host, and restore through CRI is not
// defined for Docker-backed runtimes. Kubelet's checkpoint API reports this.
func (s *Server) CheckpointContainer(ctx context.Context, r *runtime.CheckpointContainerRequest) (*runtime.CheckpointContainerResponse, error) {
	return nil, status.Errorf(codes.Unimplemented,
		"checkpoint of container %q: cri-compose does not checkpoint containers (the Docker Engine needs experimental mode and CRIU for it)", r.GetContainerId())
}
