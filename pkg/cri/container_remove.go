package cri

import (
	"context"
	"errors"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// RemoveContainer removes a container (forcibly, if it still runs) and its
// service from the project's compose file. The CRI log file stays: kubelet
// owns it. Removing a container that does not exist succeeds.
func (s *Server) RemoveContainer(ctx context.Context, r *runtime.RemoveContainerRequest) (*runtime.RemoveContainerResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if errors.Is(err, errNotFound) {
		return &runtime.RemoveContainerResponse{}, nil
	}
	if err != nil {
		return nil, grpcError(err)
	}
	if err := s.removeContainer(ctx, c); err != nil {
		return nil, grpcError(err)
	}
	return &runtime.RemoveContainerResponse{}, nil
}

func (s *Server) removeContainer(ctx context.Context, c containerRec) error {
	if err := s.docker.ContainerRemove(ctx, c.ID); err != nil && !dockerapi.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", c.ID, err)
	}
	s.pumps.stop(c.ID)
	if err := s.store.Refresh(ctx, c.ID); err != nil {
		return err
	}
	if _, err := s.store.Sandbox(c.SandboxID); err == nil {
		return s.writeProject(c.SandboxID)
	}
	return nil
}
