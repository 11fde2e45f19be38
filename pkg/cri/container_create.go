package cri

import (
	"context"
	"fmt"
	"os"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/staging"
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
	sb, err := s.store.Sandbox(r.GetPodSandboxId())
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
	cfg, imageMounts, err := s.imageVolumes(ctx, cfg)
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	user, err := s.containerUser(ctx, cfg, img)
	if err != nil {
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	in := sandbox.ContainerInput{SandboxID: sb.ID, Sandbox: sb.Config, Config: cfg, ImageID: img.ID, ImageRef: img.Ref,
		User: user, ImageMounts: imageMounts}
	var copies []staging.FileCopy
	if s.hostInfo().StageMounts { // the engine is remote: pkg/cri/staging
		if in.Staged, copies, err = s.stage.Stage(ctx, sb.Project, cfg); err != nil {
			return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
		}
	}
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
	if err := s.stage.CopyFiles(ctx, id, copies); err != nil {
		if rerr := s.docker.ContainerRemove(context.WithoutCancel(ctx), id); rerr != nil {
			klog.ErrorS(rerr, "Cannot remove a container whose files could not be staged", "container", id)
		}
		return "", fmt.Errorf("create container %q: staging its files: %w", cfg.GetMetadata().GetName(), err)
	}
	failpoint(FailCreateAfterCreate) // test only: failpoint.go
	if err := s.store.Refresh(ctx, id); err != nil {
		return "", err
	}
	if err := s.writeProject(sb.ID); err != nil {
		// A container its compose file does not name would be half-made
		// (a full state dir): kubelet retries the whole call.
		rctx := context.WithoutCancel(ctx)
		if rerr := s.docker.ContainerRemove(rctx, id); rerr != nil && !dockerapi.IsNotFound(rerr) {
			klog.ErrorS(rerr, "Cannot remove a container whose compose file could not be written", "container", id)
		}
		_ = s.store.Refresh(rctx, id)
		return "", fmt.Errorf("create container %q: %w", cfg.GetMetadata().GetName(), err)
	}
	return id, nil
}

// imageVolumes prepares the image volume mounts of cfg (image_files.go):
// each image, pulled already (kubelet pulls it as it pulls the container's
// image), is served from a read-only copy. The config returned records
// the image id of each in its mount (image_ref), which ContainerStatus
// reports back; cfg itself is left alone.
func (s *Server) imageVolumes(ctx context.Context, cfg *runtime.ContainerConfig) (*runtime.ContainerConfig, map[int]string, error) {
	var out map[int]string
	for i, m := range cfg.GetMounts() {
		if m.GetImage() == nil {
			continue
		}
		if err := sandbox.ValidateImageMount(m); err != nil {
			return nil, nil, err
		}
		img, err := s.images.Resolve(ctx, m.GetImage().GetImage())
		if err != nil {
			return nil, nil, fmt.Errorf("image volume %q: %w", m.GetContainerPath(), err)
		}
		src, err := s.files.MountSource(ctx, img.ID, m.GetImageSubPath())
		if err != nil {
			return nil, nil, fmt.Errorf("image volume %q: %w", m.GetContainerPath(), err)
		}
		if out == nil {
			out = map[int]string{}
			cfg = proto.Clone(cfg).(*runtime.ContainerConfig)
		}
		cfg.Mounts[i].Image.ImageRef = img.ID
		out[i] = src
	}
	if out == nil {
		return cfg, nil, nil
	}
	return cfg, out, nil
}

// containerUser resolves who the container runs as from the image's
// /etc/passwd and /etc/group (sandbox.ResolveUser), so that the primary
// group is among the supplementary ones, SupplementalGroupsPolicy holds,
// and ContainerStatus can say it. When the image's files cannot be read,
// the engine resolves the user as it always does (and ContainerStatus
// reports no user).
func (s *Server) containerUser(ctx context.Context, cfg *runtime.ContainerConfig, img ResolvedImage) (*sandbox.Identity, error) {
	files, err := s.files.UsersOf(ctx, img.ID)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		klog.ErrorS(err, "Cannot read the image's users and groups; the engine resolves the container's user", "image", img.ID)
		return nil, nil
	}
	id, err := sandbox.ResolveUser(cfg.GetLinux().GetSecurityContext(), img.User, files)
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// imageMounted reports whether a container of the store mounts image id
// as an image volume.
func (s *Server) imageMounted(id string) bool {
	found := false
	s.store.EachContainer(func(c containerRec) {
		for _, m := range c.Config.GetMounts() {
			// CreateContainer records the image id in the mount
			// (ImageSpec.image_ref).
			if m.GetImage().GetImageRef() == id {
				found = true
			}
		}
	})
	return found
}
