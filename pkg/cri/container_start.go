package cri

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StartContainer starts a created container and its log pump.
func (s *Server) StartContainer(ctx context.Context, r *runtime.StartContainerRequest) (*runtime.StartContainerResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	if c.State != runtime.ContainerState_CONTAINER_CREATED {
		return nil, grpcError(fmt.Errorf("start container %s: it is %s, not created: %w", c.ID, c.State, errPrecondition))
	}
	// Attached before the start, so that its log is written from the
	// stream from its first output on (logs.go).
	if c.LogPath != "" {
		s.pumps.streamBeforeStart(ctx, c.ID, c.LogPath, c.Tty, s.runningFn(c.ID))
	}
	startErr := s.docker.ContainerStart(ctx, c.ID)
	if startErr == nil {
		failpoint(FailStartAfterStart) // test only: failpoint.go
	}
	if err := s.store.Refresh(ctx, c.ID); err != nil && startErr == nil {
		return nil, grpcError(err)
	}
	if startErr != nil {
		s.pumps.stop(c.ID)
		return nil, grpcError(fmt.Errorf("start container %s: %w", c.ID, startErr))
	}
	// The engine keeps the output (local driver) until the pump reads it,
	// and the attach stream holds the container while the pump is behind,
	// so starting the pump after the container loses nothing.
	if c, err = s.store.Container(c.ID); err == nil {
		s.ensurePump(ctx, c)
	}
	return &runtime.StartContainerResponse{}, nil
}
