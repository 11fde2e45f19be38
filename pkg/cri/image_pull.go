package cri

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/registry"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// PullImage pulls the image, through the registry's mirrors first, and
// returns its id ("sha256:…") as the image ref, as containerd does.
//
// After a pull by tag through a mirror the image carries the requested name
// and not the mirror's (the mirror name is untagged, and with it the engine
// drops the mirror's digest reference): it then has no repo digest, since the
// engine records digests only for names it pulled itself. A pull by digest
// through a mirror cannot be renamed (the engine tags only with tags): the
// image keeps the mirror's digest reference, and lookups of the requested
// digest reference (ImageStatus, RemoveImage, Resolve, a ListImages filter)
// fall back to the mirror names, which are the same content by definition.
func (s *ImageService) PullImage(ctx context.Context, req *runtime.PullImageRequest) (*runtime.PullImageResponse, error) {
	r, err := parseImageSpec(req.GetImage())
	if err != nil {
		return nil, grpcError(fmt.Errorf("pull image: %w", err))
	}
	if r.named == nil {
		return nil, grpcError(fmt.Errorf("pull image %q: %w: an image id cannot be pulled, give a name", r.raw, sandbox.ErrInvalid))
	}
	id, err := s.pull(ctx, r.named, imagePullAuth(req.GetAuth()))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		// The engine's error already names the pull and the image unless
		// it came through a mirror or a retry.
		one := err
		if pe, ok := err.(imagePullErrors); ok && len(pe) == 1 {
			one = pe[0]
		}
		if de, ok := one.(*dockerapi.Error); !ok || de.Ref != r.named.String() {
			err = fmt.Errorf("pull image %q: %w", r.named.String(), err)
		}
		return nil, grpcError(err)
	}
	klog.V(2).InfoS("Pulled image", "image", r.named.String(), "id", id)
	return &runtime.PullImageResponse{ImageRef: id}, nil
}

// imagePullAuth converts CRI credentials to the engine's; nil when there are none.
// A base64 "user:password" in auth fills a missing username and password.
func imagePullAuth(a *runtime.AuthConfig) *registry.AuthConfig {
	if a == nil {
		return nil
	}
	out := &registry.AuthConfig{
		Username:      a.GetUsername(),
		Password:      a.GetPassword(),
		Auth:          a.GetAuth(),
		ServerAddress: a.GetServerAddress(),
		IdentityToken: a.GetIdentityToken(),
		RegistryToken: a.GetRegistryToken(),
	}
	if out.Auth != "" && out.Username == "" && out.Password == "" {
		if b, err := base64.StdEncoding.DecodeString(out.Auth); err == nil {
			if u, p, ok := strings.Cut(string(b), ":"); ok {
				out.Username, out.Password = u, p
			}
		}
	}
	if *out == (registry.AuthConfig{}) {
		return nil
	}
	return out
}

// pull pulls named (normalized, tagged or digested) through its registry's
// mirrors in order, then from the registry itself, and returns the image id.
func (s *ImageService) pull(ctx context.Context, named reference.Named, auth *registry.AuthConfig) (string, error) {
	var errs imagePullErrors
	for _, ep := range s.mirrors[reference.Domain(named)] {
		id, err := s.pullFromMirror(ctx, named, ep)
		if err == nil {
			return id, nil
		}
		klog.V(2).InfoS("Pull through mirror failed", "image", named.String(), "mirror", ep.String(), "err", err)
		errs = append(errs, fmt.Errorf("mirror %s: %w", ep, err))
		if ctx.Err() != nil {
			return "", errs
		}
	}
	ref := named.String()
	if err := s.d.ImagePull(ctx, ref, auth); err != nil {
		if len(errs) > 0 {
			err = fmt.Errorf("registry %s: %w", reference.Domain(named), err)
		}
		return "", append(errs, err)
	}
	img, err := s.d.ImageInspect(ctx, ref)
	if err != nil {
		return "", fmt.Errorf("after pull: %w", err)
	}
	return img.ID, nil
}

// pullFromMirror pulls named from mirror ep. A tagged image is then tagged
// with the requested name and loses the mirror's name, unless the engine had
// that name before the pull (someone else's then).
func (s *ImageService) pullFromMirror(ctx context.Context, named reference.Named, ep mirrorEndpoint) (string, error) {
	mref, err := ep.rewrite(named)
	if err != nil {
		return "", err
	}
	mname := mref.String()
	// Concurrent pulls of registry.k8s.io/x and gcr.io/x may share a mirror
	// name: pull, tag and untag it one at a time.
	defer s.pulls.lock(mname)()

	_, isDigest := mref.(reference.Digested)
	had := false
	if !isDigest {
		if _, err := s.d.ImageInspect(ctx, mname); err == nil {
			had = true
		} else if !dockerapi.IsNotFound(err) {
			return "", err
		}
	}
	// Mirrors are pulled anonymously: credentials are for the registry.
	if err := s.d.ImagePull(ctx, mname, nil); err != nil {
		return "", err
	}
	img, err := s.d.ImageInspect(ctx, mname)
	if err != nil {
		return "", fmt.Errorf("after pull: %w", err)
	}
	if isDigest {
		return img.ID, nil
	}
	if err := s.d.ImageTag(ctx, img.ID, named.String()); err != nil {
		return "", err
	}
	if !had {
		// The image has the requested name now, so this only untags.
		if err := s.d.ImageRemove(ctx, mname, false); err != nil && !dockerapi.IsNotFound(err) {
			klog.InfoS("Could not drop the mirror's name of a pulled image", "image", named.String(), "mirrorName", mname, "err", err)
		}
	}
	return img.ID, nil
}

// imagePullErrors are the failed attempts of one pull, in order. Its gRPC code is
// the first attempt's (errors.As and errors.Is look at them in order).
type imagePullErrors []error

func (e imagePullErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e imagePullErrors) Unwrap() []error { return e }
