package cri

import (
	"context"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// RunPodSandbox creates and starts a pod's infra container: the first
// service of a new Compose project.
func (s *Server) RunPodSandbox(ctx context.Context, r *runtime.RunPodSandboxRequest) (*runtime.RunPodSandboxResponse, error) {
	id, err := s.runPodSandbox(ctx, r)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtime.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (s *Server) runPodSandbox(ctx context.Context, r *runtime.RunPodSandboxRequest) (string, error) {
	cfg := r.GetConfig()
	if err := sandbox.ValidateSandbox(cfg); err != nil {
		return "", err
	}
	if h := r.GetRuntimeHandler(); h != "" && h != "runc" {
		return "", fmt.Errorf("%w: runtime handler %q is not supported (only the engine's default runtime)", sandbox.ErrInvalid, h)
	}
	if s.netRecheck.Load() {
		s.checkPodNetwork(ctx, true) // before the sandbox holds on to it
	}
	s.netMu.RLock() // the pod network stays as it is until the sandbox is on it
	defer s.netMu.RUnlock()
	if err := s.ready(ctx); err != nil {
		return "", err
	}
	podCgroup, err := sandbox.PodCgroup(cfg, s.hostInfo())
	if err != nil {
		return "", err
	}
	if podCgroup != "" {
		// Kept in the sandbox's config, so that its containers, its stats
		// and its removal all find the cgroup.
		cfg = proto.Clone(cfg).(*runtime.PodSandboxConfig)
		cfg.Linux.CgroupParent = podCgroup
	}
	spec, err := sandbox.SandboxSpec(cfg, s.hostInfo())
	if err != nil {
		return "", err
	}
	spec.SetConfigHash()
	done, err := s.projects.create(spec.Project, func() error {
		_, serr := os.Stat(s.hostInfo().ProjectDir(spec.Project))
		err := s.writeResolvConf(spec.Project, cfg) // the infra container mounts it
		if err != nil && serr != nil {
			// Nothing half-made (a full state dir), in a folder of its
			// own, not an existing pod's.
			_ = s.removeProject(spec.Project)
		}
		return err
	})
	defer done()
	if err != nil {
		return "", err
	}
	if podCgroup != "" {
		if err := makePodCgroup(podCgroup, cfg.GetLinux().GetResources()); err != nil {
			return "", err
		}
	}
	failpoint(FailRunBeforeInfraCreate) // test only: failpoint.go
	id, err := s.docker.ContainerCreate(ctx, spec.Name, spec.Config, spec.HostConfig, spec.Networking)
	if dockerapi.IsConflict(err) {
		return "", fmt.Errorf("pod sandbox %s/%s attempt %d exists already as %s (%s): %w",
			cfg.GetMetadata().GetNamespace(), cfg.GetMetadata().GetName(), cfg.GetMetadata().GetAttempt(),
			s.existingID(ctx, spec.Name), spec.Name, errAlreadyExists)
	}
	if dockerapi.IsNotFound(err) && spec.Config.Image == s.hostInfo().InfraImage {
		s.unprepare() // the pause image went away: load it again once
		if err = s.ready(ctx); err == nil {
			id, err = s.docker.ContainerCreate(ctx, spec.Name, spec.Config, spec.HostConfig, spec.Networking)
		}
	}
	if err != nil {
		return "", fmt.Errorf("create pod sandbox %s: %w", spec.Project, err)
	}
	failpoint(FailRunAfterInfraCreate)
	if err := s.store.Refresh(ctx, id); err != nil {
		return "", err
	}
	if err := s.writeProject(id); err != nil {
		s.cleanupSandbox(id, spec.Project, podCgroup)
		return "", err
	}
	failpoint(FailRunAfterComposeWrite)
	if err := s.docker.ContainerStart(ctx, id); err != nil {
		// Leave nothing behind: kubelet retries with a fresh RunPodSandbox.
		s.cleanupSandbox(id, spec.Project, podCgroup)
		return "", fmt.Errorf("start pod sandbox %s: %w", spec.Project, err)
	}
	failpoint(FailRunAfterStart)
	if err := s.store.Refresh(ctx, id); err != nil {
		return "", err
	}
	klog.V(1).InfoS("Pod sandbox running", "id", id, "project", spec.Project)
	return id, nil
}

// cleanupSandbox undoes a half-made sandbox, with a context of its own so
// that a cancelled request still cleans up; podCgroup is the pod cgroup
// cri-compose made for it ("": none).
func (s *Server) cleanupSandbox(id, project, podCgroup string) {
	ctx := context.Background()
	if err := s.docker.ContainerRemove(ctx, id); err != nil && !dockerapi.IsNotFound(err) {
		klog.ErrorS(err, "Cannot remove a half-made pod sandbox", "id", id)
	}
	_ = s.store.Refresh(ctx, id)
	_ = s.removeProject(project)
	if podCgroup != "" {
		if err := removePodCgroup(podCgroup); err != nil {
			klog.ErrorS(err, "Cannot remove a half-made pod sandbox's cgroup", "id", id)
		}
	}
}

// existingID names the container that holds an engine name, for errors.
func (s *Server) existingID(ctx context.Context, name string) string {
	in, err := s.docker.ContainerInspect(ctx, name)
	if err != nil {
		return "?"
	}
	return in.ID
}
