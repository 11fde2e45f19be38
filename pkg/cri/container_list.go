package cri

import (
	"context"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListContainers answers from the store, newest first.
func (s *Server) ListContainers(ctx context.Context, r *runtime.ListContainersRequest) (*runtime.ListContainersResponse, error) {
	if err := s.store.WaitSynced(ctx); err != nil {
		return nil, grpcError(err)
	}
	f := r.GetFilter()
	var out []*runtime.Container
	s.store.EachContainer(func(c containerRec) {
		if f != nil {
			if f.GetId() != "" && !strings.HasPrefix(c.ID, f.GetId()) {
				return
			}
			if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.SandboxID, f.GetPodSandboxId()) {
				return
			}
			if f.GetState() != nil && f.GetState().GetState() != c.State {
				return
			}
			if !matchLabels(f.GetLabelSelector(), c.Config.GetLabels()) {
				return
			}
		}
		out = append(out, &runtime.Container{
			Id: c.ID, PodSandboxId: c.SandboxID, Metadata: c.Config.GetMetadata(),
			Image:    &runtime.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Config.GetImage().GetImage()},
			ImageRef: c.ImageID, ImageId: c.ImageID, State: c.State, CreatedAt: c.CreatedAt,
			Labels: c.Config.GetLabels(), Annotations: c.Config.GetAnnotations(),
		})
	})
	slices.SortFunc(out, func(a, b *runtime.Container) int {
		return newestFirst(recKey{a.CreatedAt, a.Id}, recKey{b.CreatedAt, b.Id})
	})
	return &runtime.ListContainersResponse{Containers: out}, nil
}
