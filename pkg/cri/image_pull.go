package cri

import (
	"context"
	"errors"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/images"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// PullImage pulls the image, through the registry's mirrors first, and
// returns its id ("sha256:…") as the image ref, as containerd does. What a
// pull through a mirror leaves is images.Store.Pull's to say; lookups of a
// digest reference pulled so (ImageStatus, RemoveImage, Resolve, a
// ListImages filter) fall back to the mirror names.
func (s *ImageService) PullImage(ctx context.Context, req *runtime.PullImageRequest) (*runtime.PullImageResponse, error) {
	r, err := images.ParseSpec(req.GetImage())
	if err != nil {
		return nil, grpcError(fmt.Errorf("pull image: %w", err))
	}
	if r.Named == nil {
		return nil, grpcError(fmt.Errorf("pull image %q: %w: an image id cannot be pulled, give a name", r.Raw, sandbox.ErrInvalid))
	}
	id, err := s.images.Pull(ctx, r.Named, images.PullAuth(req.GetAuth()))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		// The engine's error already names the pull and the image unless
		// it came through a mirror or a retry.
		one := err
		if pe, ok := err.(images.PullErrors); ok && len(pe) == 1 {
			one = pe[0]
		}
		if de, ok := one.(*dockerapi.Error); !ok || de.Ref != r.Named.String() {
			err = fmt.Errorf("pull image %q: %w", r.Named.String(), err)
		}
		return nil, grpcError(err)
	}
	klog.V(2).InfoS("Pulled image", "image", r.Named.String(), "id", id)
	return &runtime.PullImageResponse{ImageRef: id}, nil
}
