package cri

import (
	"context"

	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// streamImagesBatch is how many images one StreamImages message carries.
const streamImagesBatch = 500

// ListImages lists the engine's images, untagged ones included (kubelet's
// image garbage collector needs to see them).
//
// A filter naming a tag, a digest or an image id (or id prefix) selects that
// image, as ImageStatus finds it; a filter naming a repository only
// ("busybox") selects the images with any tag or digest in that repository
// ("docker.io/library/busybox").
func (s *ImageService) ListImages(ctx context.Context, req *runtime.ListImagesRequest) (*runtime.ListImagesResponse, error) {
	imgs, err := s.images.List(ctx, req.GetFilter())
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtime.ListImagesResponse{Images: imgs}, nil
}

// StreamImages is ListImages in batches.
func (s *ImageService) StreamImages(req *runtime.StreamImagesRequest, stream grpc.ServerStreamingServer[runtime.StreamImagesResponse]) error {
	imgs, err := s.images.List(stream.Context(), req.GetFilter())
	if err != nil {
		return grpcError(err)
	}
	for len(imgs) > 0 {
		n := min(len(imgs), streamImagesBatch)
		if err := stream.Send(&runtime.StreamImagesResponse{Images: imgs[:n]}); err != nil {
			return err
		}
		imgs = imgs[n:]
	}
	return nil
}
