package cri

import (
	"context"
	"fmt"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/image"
	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
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
	imgs, err := s.listImages(ctx, req.GetFilter())
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtime.ListImagesResponse{Images: imgs}, nil
}

// StreamImages is ListImages in batches.
func (s *ImageService) StreamImages(req *runtime.StreamImagesRequest, stream grpc.ServerStreamingServer[runtime.StreamImagesResponse]) error {
	imgs, err := s.listImages(stream.Context(), req.GetFilter())
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

func (s *ImageService) listImages(ctx context.Context, filter *runtime.ImageFilter) ([]*runtime.Image, error) {
	var repo string // select by repository
	if spec := filter.GetImage(); spec.GetImage() != "" {
		r, err := parseImageSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("list images: %w", err)
		}
		if r.named == nil || r.explicit || r.idPrefix != "" {
			img, err := s.lookup(ctx, r)
			if err != nil {
				return nil, fmt.Errorf("list images %q: %w", r.String(), err)
			}
			if img != nil {
				return []*runtime.Image{inspectToCRIImage(img)}, nil
			}
			if r.named == nil || r.explicit {
				return []*runtime.Image{}, nil
			}
			// Not an id prefix after all: a repository name.
		}
		repo = r.named.Name()
	}
	sums, err := s.d.ImageList(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := make([]*runtime.Image, 0, len(sums))
	for _, sum := range sums {
		if repo != "" && !inRepository(sum, repo) {
			continue
		}
		user, ok := s.imageConfigUser(ctx, sum.ID)
		if !ok {
			continue // removed while listing
		}
		out = append(out, toCRIImage(sum.ID, sum.RepoTags, sum.RepoDigests, sum.Size, user))
	}
	if repo == "" {
		s.pruneUsers(sums)
	}
	return out, nil
}

// inRepository reports whether one of the image's names is in repository
// repo (a normalized name such as docker.io/library/busybox).
func inRepository(sum image.Summary, repo string) bool {
	for _, refs := range [][]string{sum.RepoTags, sum.RepoDigests} {
		for _, s := range refs {
			if n, err := reference.ParseNormalizedNamed(s); err == nil && n.Name() == repo {
				return true
			}
		}
	}
	return false
}

// imageConfigUser returns the config User of image id, inspecting it once:
// image ids name immutable content. ok is false when the image is gone.
func (s *ImageService) imageConfigUser(ctx context.Context, id string) (user string, ok bool) {
	s.usersMu.Lock()
	user, ok = s.users[id]
	s.usersMu.Unlock()
	if ok {
		return user, true
	}
	img, err := s.d.ImageInspect(ctx, id)
	if err != nil {
		// Gone, or the engine failed: list it without a user rather
		// than fail the whole list, unless it is gone.
		return "", !dockerapi.IsNotFound(err)
	}
	if img.Config != nil {
		user = img.Config.User
	}
	s.usersMu.Lock()
	s.users[id] = user
	s.usersMu.Unlock()
	return user, true
}

// pruneUsers forgets the users of images that no longer exist.
func (s *ImageService) pruneUsers(sums []image.Summary) {
	live := make(map[string]bool, len(sums))
	for _, sum := range sums {
		live[sum.ID] = true
	}
	s.usersMu.Lock()
	defer s.usersMu.Unlock()
	for id := range s.users {
		if !live[id] {
			delete(s.users, id)
		}
	}
}
