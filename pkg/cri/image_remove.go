package cri

import (
	"context"
	"fmt"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

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
	r, err := parseImageSpec(req.GetImage())
	if err != nil {
		return nil, grpcError(fmt.Errorf("remove image: %w", err))
	}
	// Removals of one reference wait for each other: the later ones then
	// find the image gone. While the engine deletes an image's layers, an
	// inspect of it can fail ("layer does not exist"): a removal by
	// another reference (name and id) looks again until it is gone.
	unlock := s.pulls.lock("remove " + r.String())
	defer unlock()
	img, err := s.lookup(ctx, r)
	for wait := 50 * time.Millisecond; err != nil && wait < 2*time.Second && ctx.Err() == nil; wait *= 2 {
		time.Sleep(wait)
		img, err = s.lookup(ctx, r)
	}
	if err != nil {
		return nil, grpcError(fmt.Errorf("remove image %q: %w", r.String(), err))
	}
	if img == nil {
		return &runtime.RemoveImageResponse{}, nil
	}
	if err := s.d.ImageRemove(ctx, img.ID, true); err != nil {
		switch {
		case dockerapi.IsNotFound(err):
			// Removed concurrently: done all the same.
		case dockerapi.IsConflict(err):
			return nil, grpcError(fmt.Errorf("remove image %q (%s): %w: %w", r.String(), img.ID, errPrecondition, err))
		default:
			// A removal racing with this one can make the engine answer
			// "unrecognized image ID" instead of not found: the image is
			// gone either way, which is what was asked.
			if _, ierr := s.d.ImageInspect(ctx, img.ID); !dockerapi.IsNotFound(ierr) {
				return nil, grpcError(fmt.Errorf("remove image %q (%s): %w", r.String(), img.ID, err))
			}
		}
	}
	s.usersMu.Lock()
	delete(s.users, img.ID)
	s.usersMu.Unlock()
	if s.onRemove != nil {
		s.onRemove(img.ID)
	}
	klog.V(2).InfoS("Removed image", "image", r.String(), "id", img.ID)
	return &runtime.RemoveImageResponse{}, nil
}
