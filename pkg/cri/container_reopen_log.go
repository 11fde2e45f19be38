package cri

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog makes the container's log pump write to a new file at
// the log path, after kubelet renamed the old one away for rotation.
func (s *Server) ReopenContainerLog(ctx context.Context, r *runtime.ReopenContainerLogRequest) (*runtime.ReopenContainerLogResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	if c.State != runtime.ContainerState_CONTAINER_RUNNING {
		return nil, grpcError(fmt.Errorf("reopen log of container %s: it is not running: %w", c.ID, errPrecondition))
	}
	ok, err := s.pumps.reopen(c.ID)
	if err != nil {
		return nil, grpcError(fmt.Errorf("reopen log of container %s: %w", c.ID, err))
	}
	if !ok {
		return nil, grpcError(fmt.Errorf("reopen log of container %s: it has no log path: %w", c.ID, errPrecondition))
	}
	return &runtime.ReopenContainerLogResponse{}, nil
}
