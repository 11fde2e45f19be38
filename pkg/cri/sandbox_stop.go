package cri

import (
	"context"
	"errors"
	"fmt"
	"sync"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// StopPodSandbox stops every container of the pod, then its infra
// container. A sandbox that does not exist is already stopped.
func (s *Server) StopPodSandbox(ctx context.Context, r *runtime.StopPodSandboxRequest) (*runtime.StopPodSandboxResponse, error) {
	sb, err := s.store.Sandbox(r.GetPodSandboxId())
	if errors.Is(err, errNotFound) {
		return &runtime.StopPodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, grpcError(err)
	}
	if err := s.stopSandbox(ctx, sb); err != nil {
		return nil, grpcError(err)
	}
	return &runtime.StopPodSandboxResponse{}, nil
}

func (s *Server) stopSandbox(ctx context.Context, sb sandboxRec) error {
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for _, c := range s.store.ContainersOf(sb.ID) {
		if c.State != runtime.ContainerState_CONTAINER_RUNNING {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// kubelet has already stopped them gracefully; what is left is killed.
			if err := s.stopContainer(ctx, c.ID, 0); err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
			failpoint(FailStopBetweenContainers) // test only: failpoint.go
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("stop pod sandbox %s: %w", sb.ID, err)
	default:
	}
	failpoint(FailStopBeforeInfraStop)
	if err := s.docker.ContainerStop(ctx, sb.ID, 0); err != nil && !dockerapi.IsNotFound(err) {
		return fmt.Errorf("stop pod sandbox %s: %w", sb.ID, err)
	}
	return s.store.Refresh(ctx, sb.ID)
}
