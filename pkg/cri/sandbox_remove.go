package cri

import (
	"context"
	"errors"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// RemovePodSandbox removes every container of the pod (forcibly, as CRI
// asks), its infra container and its project folder. Removing a sandbox
// that does not exist succeeds.
func (s *Server) RemovePodSandbox(ctx context.Context, r *runtime.RemovePodSandboxRequest) (*runtime.RemovePodSandboxResponse, error) {
	sb, err := s.store.Sandbox(r.GetPodSandboxId())
	if errors.Is(err, errNotFound) {
		return &runtime.RemovePodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, grpcError(err)
	}
	for _, c := range s.store.ContainersOf(sb.ID) {
		if err := s.removeContainer(ctx, c); err != nil {
			return nil, grpcError(fmt.Errorf("remove pod sandbox %s: %w", sb.ID, err))
		}
	}
	failpoint(FailRemoveAfterContainers) // test only: failpoint.go
	if err := s.docker.ContainerRemove(ctx, sb.ID); err != nil && !dockerapi.IsNotFound(err) {
		return nil, grpcError(fmt.Errorf("remove pod sandbox %s: %w", sb.ID, err))
	}
	failpoint(FailRemoveAfterInfraRemove)
	if err := s.store.Refresh(ctx, sb.ID); err != nil {
		return nil, grpcError(err)
	}
	if s.hostInfo().StageMounts { // pkg/cri/staging
		if err := s.stage.RemovePod(ctx, sb.Project); err != nil {
			return nil, grpcError(fmt.Errorf("remove pod sandbox %s: %w", sb.ID, err))
		}
	}
	if p := sb.Config.GetLinux().GetCgroupParent(); sandbox.IsPodCgroup(p, s.hostInfo()) {
		if err := removePodCgroup(p); err != nil {
			return nil, grpcError(fmt.Errorf("remove pod sandbox %s: %w", sb.ID, err))
		}
	}
	if err := s.removeProject(sb.Project); err != nil {
		return nil, grpcError(err)
	}
	return &runtime.RemovePodSandboxResponse{}, nil
}
