package cri

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// StopContainer sends the stop signal, waits up to the timeout, then kills.
// Stopping a container that does not exist succeeds.
func (s *Server) StopContainer(ctx context.Context, r *runtime.StopContainerRequest) (*runtime.StopContainerResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if errors.Is(err, errNotFound) {
		return &runtime.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, grpcError(err)
	}
	if err := s.stopContainer(ctx, c.ID, time.Duration(r.GetTimeout())*time.Second); err != nil {
		return nil, grpcError(err)
	}
	return &runtime.StopContainerResponse{}, nil
}

func (s *Server) stopContainer(ctx context.Context, id string, timeout time.Duration) error {
	if timeout < 0 {
		timeout = 0
	}
	if err := s.docker.ContainerStop(ctx, id, timeout); err != nil && !dockerapi.IsNotFound(err) {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	return s.store.Refresh(ctx, id)
}
