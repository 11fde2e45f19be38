package cri

import (
	"context"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListContainers answers from the store.
func (s *Server) ListContainers(ctx context.Context, r *runtime.ListContainersRequest) (*runtime.ListContainersResponse, error) {
	if err := s.store.waitSynced(ctx); err != nil {
		return nil, grpcError(err)
	}
	f := r.GetFilter()
	var out []*runtime.Container
	for _, c := range s.store.listContainers() {
		if f != nil {
			if f.GetId() != "" && !strings.HasPrefix(c.ID, f.GetId()) {
				continue
			}
			if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) {
				continue
			}
			if f.GetState() != nil && f.GetState().GetState() != c.State {
				continue
			}
			if !matchLabels(f.GetLabelSelector(), c.Config.GetLabels()) {
				continue
			}
		}
		out = append(out, &runtime.Container{
			Id: c.ID, PodSandboxId: c.SandboxID, Metadata: c.Config.GetMetadata(),
			Image:    &runtime.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Config.GetImage().GetImage()},
			ImageRef: c.ImageID, ImageId: c.ImageID, State: c.State, CreatedAt: c.CreatedAt,
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(),
		})
	}
	return &runtime.ListContainersResponse{Containers: out}, nil
}
