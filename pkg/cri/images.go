package cri

import (
	"context"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/images"
)

// ImageService is the CRI image service on the Docker Engine's image store
// (pkg/cri/images), one file per RPC beside this one.
//
// Images are reported as containerd and kubelet name them: the id is the
// engine's image id ("sha256:…"), repo tags and digests are normalized
// ("docker.io/library/busybox:latest", "docker.io/library/busybox@sha256:…"),
// and PullImage returns the image id as the image ref. References in
// requests are normalized the same way (images.ParseRef).
type ImageService struct {
	runtime.UnimplementedImageServiceServer

	d      Engine
	images *images.Store

	// onRemove is told of every image RemoveImage removed (by id).
	onRemove func(id string)
}

var _ runtime.ImageServiceServer = (*ImageService)(nil)

// NewImageService returns the image service of engine d, pulling as o
// says. Invalid mirror entries are logged and left out: check them with
// images.ParseMirrors or Mirrors.Validate first. onRemove, if set, is told
// of every image RemoveImage removed (by id).
func NewImageService(d Engine, o images.Options, onRemove func(id string)) *ImageService {
	return &ImageService{d: d, images: images.New(d, o), onRemove: onRemove}
}

// ResolvedImage is an existing image, as CreateContainer needs it.
type ResolvedImage struct {
	ID         string // engine image id, "sha256:…"
	Ref        string // the normalized requested name, or the id when asked by id
	RepoDigest string // first normalized repo digest, or ""
	User       string // the image config's User ("" means root)
}

// Resolve looks up the image that ref (a name, a digest reference or an image
// id) names. A missing image gives an error wrapping errNotFound that names
// the image; a bad reference one wrapping sandbox.ErrInvalid.
func (s *ImageService) Resolve(ctx context.Context, ref string) (ResolvedImage, error) {
	r, err := images.ParseRef(ref)
	if err != nil {
		return ResolvedImage{}, err
	}
	img, err := s.images.Lookup(ctx, r)
	if err != nil {
		return ResolvedImage{}, fmt.Errorf("resolve image %q: %w", ref, err)
	}
	if img == nil {
		return ResolvedImage{}, fmt.Errorf("image %q: %w (pull it first)", r.String(), errNotFound)
	}
	out := ResolvedImage{ID: img.ID, Ref: img.ID}
	if r.Named != nil {
		out.Ref = r.Named.String()
	}
	if ds := images.NormalizeRefs(img.RepoDigests, true); len(ds) > 0 {
		out.RepoDigest = ds[0]
	}
	if img.Config != nil {
		out.User = img.Config.User
	}
	return out, nil
}
