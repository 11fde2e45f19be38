package cri

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/images"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// RemoveImage removes the image a name, digest reference or image id (full
// or a prefix) names, with all its names: the CRI says that removing an image
// by one tag removes its other tags too (critest checks it), so the request
// is resolved to the image id and the engine deletes that with force, which
// takes every tag and digest along. A missing image is a success (the call
// is idempotent). The engine refuses when a running container uses the
// image, or a child image builds on it: that is FailedPrecondition. Stopped
// containers do not keep an image, as with containerd.
func (s *ImageService) RemoveImage(ctx context.Context, req *runtime.RemoveImageRequest) (*runtime.RemoveImageResponse, error) {
	r, err := images.ParseSpec(req.GetImage())
	if err != nil {
		return nil, grpcError(fmt.Errorf("remove image: %w", err))
	}
	id, err := s.images.Remove(ctx, r)
	switch {
	case err != nil && id == "":
		return nil, grpcError(fmt.Errorf("remove image %q: %w", r.String(), err))
	case dockerapi.IsConflict(err):
		return nil, grpcError(fmt.Errorf("remove image %q (%s): %w: %w", r.String(), id, errPrecondition, err))
	case err != nil:
		return nil, grpcError(fmt.Errorf("remove image %q (%s): %w", r.String(), id, err))
	case id == "":
		return &runtime.RemoveImageResponse{}, nil
	}
	if s.onRemove != nil {
		s.onRemove(id)
	}
	klog.V(2).InfoS("Removed image", "image", r.String(), "id", id)
	return &runtime.RemoveImageResponse{}, nil
}
