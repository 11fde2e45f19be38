package cri

import (
	"context"
	"fmt"
	"os"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// CreateContainer adds a service to the pod's project: a container pinned to
// the resolved image and joined to the infra container's namespaces.
func (s *Server) CreateContainer(ctx context.Context, r *runtime.CreateContainerRequest) (*runtime.CreateContainerResponse, error) {
	id, err := s.createContainer(ctx, r)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtime.CreateContainerResponse{ContainerId: id}, nil
}

func (s *Server) createContainer(ctx context.Context, r *runtime.CreateContainerRequest) (string, error) {
	cfg := r.GetConfig()
	if err := sandbox.ValidateContainer(cfg); err != nil {
		return "", err
	}
	sb, err := s.store.sandbox(r.GetPodSandboxId())
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	if sb.State != runtime.PodSandboxState_SANDBOX_READY {
		return "", fmt.Errorf("create container %q: pod sandbox %s is not ready: %w", cfg.GetMetadata().GetName(), sb.ID, errPrecondition)
	}
	img, err := s.images.Resolve(ctx, cfg.GetImage().GetImage())
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	in := sandbox.ContainerInput{SandboxID: sb.ID, Sandbox: sb.Config, Config: cfg, ImageID: img.ID, ImageRef: img.Ref}
	if p := sandbox.SeccompProfilePath(cfg); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("%w: seccomp profile %q: %v", sandbox.ErrInvalid, p, err)
		}
		in.SeccompProfile = b
	}
	spec, err := sandbox.ContainerSpec(in, s.hostInfo())
	if err != nil {
		return "", err
	}
	spec.SetConfigHash()
	id, err := s.docker.ContainerCreate(ctx, spec.Name, spec.Config, spec.HostConfig, nil)
	if dockerapi.IsConflict(err) {
		return "", fmt.Errorf("container %q attempt %d of pod sandbox %s exists already as %s (%s): %w",
			cfg.GetMetadata().GetName(), cfg.GetMetadata().GetAttempt(), sb.ID, s.existingID(ctx, spec.Name), spec.Name, errAlreadyExists)
	}
	if err != nil {
		return "", fmt.Errorf("create container %q in %s: %w", cfg.GetMetadata().GetName(), sb.Project, err)
	}
	if err := s.store.refresh(ctx, id); err != nil {
		return "", err
	}
	if err := s.writeProject(sb.ID); err != nil {
		return "", err
	}
	return id, nil
}
