package images

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/registry"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// Store is the engine's image store as the CRI sees it.
type Store struct {
	d       Engine
	mirrors map[string][]mirrorEndpoint
	// progressTimeout cancels a pull that reports no progress for that
	// long (0: never).
	progressTimeout time.Duration

	locks Locks // serializes pull, tag and untag of one mirror name, and removals of one reference

	usersMu sync.Mutex
	users   map[string]string // image id → config User; images are immutable
}

// Options are how the image store pulls.
type Options struct {
	// Mirrors are pulled through first, in order, then the registry.
	Mirrors Mirrors
	// PullProgressTimeout cancels a pull from one place (a mirror or the
	// registry) when the engine reports no progress for that long, so a
	// stalled registry fails the pull, or passes it to the next place,
	// instead of holding it forever, as containerd's
	// image_pull_progress_timeout does (0: never).
	PullProgressTimeout time.Duration
}

// New returns the image store of engine d. Invalid mirror entries are
// logged and left out: check them with ParseMirrors or Mirrors.Validate
// first.
func New(d Engine, o Options) *Store {
	mirrors := o.Mirrors
	parsed, err := mirrors.parse()
	if err != nil {
		klog.ErrorS(err, "Invalid registry mirrors; pulling without the invalid entries")
		parsed = map[string][]mirrorEndpoint{}
		for k, eps := range mirrors {
			host, herr := normalizeRegistryHost(k)
			if herr != nil {
				continue
			}
			for _, raw := range eps {
				if ep, eerr := parseMirrorEndpoint(raw); eerr == nil {
					parsed[host] = append(parsed[host], ep)
				}
			}
		}
	}
	return &Store{d: d, mirrors: parsed, progressTimeout: o.PullProgressTimeout, users: map[string]string{}}
}

// Lookup inspects the image r names: nil and no error when there is none.
// A digest reference that the engine does not know is also looked up under
// its mirrors' names, where a digest pull through a mirror leaves it.
func (s *Store) Lookup(ctx context.Context, r Ref) (*image.InspectResponse, error) {
	var candidates []string
	switch {
	case r.ID != "":
		candidates = []string{r.ID}
	case r.Named != nil:
		candidates = []string{r.Named.String()}
		if _, ok := r.Named.(reference.Digested); ok {
			for _, ep := range s.mirrors[reference.Domain(r.Named)] {
				if m, err := ep.rewrite(r.Named); err == nil {
					candidates = append(candidates, m.String())
				}
			}
		}
	}
	for _, c := range candidates {
		img, err := s.d.ImageInspect(ctx, c)
		if err == nil {
			return &img, nil
		}
		if !dockerapi.IsNotFound(err) {
			return nil, err
		}
	}
	if r.IDPrefix != "" {
		// The engine takes an unambiguous id prefix without "sha256:".
		img, err := s.d.ImageInspect(ctx, strings.TrimPrefix(r.IDPrefix, "sha256:"))
		if err == nil && strings.HasPrefix(img.ID, r.IDPrefix) {
			return &img, nil
		}
		if err != nil && !dockerapi.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, nil
}

// PullAuth converts CRI credentials to the engine's; nil when there are none.
// A base64 "user:password" in auth fills a missing username and password.
func PullAuth(a *runtime.AuthConfig) *registry.AuthConfig {
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

// Pull pulls named (normalized, tagged or digested) through its registry's
// mirrors in order, then from the registry itself, and returns the image id.
// A failure is PullErrors, one per attempt.
//
// After a pull by tag through a mirror the image carries the requested name
// and not the mirror's (the mirror name is untagged, and with it the engine
// drops the mirror's digest reference): it then has no repo digest, since the
// engine records digests only for names it pulled itself. A pull by digest
// through a mirror cannot be renamed (the engine tags only with tags): the
// image keeps the mirror's digest reference, and Lookup of the requested
// digest reference falls back to the mirror names, which are the same
// content by definition.
func (s *Store) Pull(ctx context.Context, named reference.Named, auth *registry.AuthConfig) (string, error) {
	var errs PullErrors
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
	if err := s.pull(ctx, ref, auth); err != nil {
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
func (s *Store) pullFromMirror(ctx context.Context, named reference.Named, ep mirrorEndpoint) (string, error) {
	mref, err := ep.rewrite(named)
	if err != nil {
		return "", err
	}
	mname := mref.String()
	// Concurrent pulls of registry.k8s.io/x and gcr.io/x may share a mirror
	// name: pull, tag and untag it one at a time.
	defer s.locks.Lock(mname)()

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
	if err := s.pull(ctx, mname, nil); err != nil {
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

// PullErrors are the failed attempts of one pull, in order. Its gRPC code is
// the first attempt's (errors.As and errors.Is look at them in order).
type PullErrors []error

func (e PullErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e PullErrors) Unwrap() []error { return e }

// List lists the engine's images, untagged ones included (kubelet's image
// garbage collector needs to see them).
//
// A filter naming a tag, a digest or an image id (or id prefix) selects that
// image, as Lookup finds it; a filter naming a repository only ("busybox")
// selects the images with any tag or digest in that repository
// ("docker.io/library/busybox").
func (s *Store) List(ctx context.Context, filter *runtime.ImageFilter) ([]*runtime.Image, error) {
	var repo string // select by repository
	if spec := filter.GetImage(); spec.GetImage() != "" {
		r, err := ParseSpec(spec)
		if err != nil {
			return nil, fmt.Errorf("list images: %w", err)
		}
		if r.Named == nil || r.Explicit || r.IDPrefix != "" {
			img, err := s.Lookup(ctx, r)
			if err != nil {
				return nil, fmt.Errorf("list images %q: %w", r.String(), err)
			}
			if img != nil {
				return []*runtime.Image{InspectToCRI(img)}, nil
			}
			if r.Named == nil || r.Explicit {
				return []*runtime.Image{}, nil
			}
			// Not an id prefix after all: a repository name.
		}
		repo = r.Named.Name()
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
		user, ok := s.configUser(ctx, sum.ID)
		if !ok {
			continue // removed while listing
		}
		out = append(out, ToCRI(sum.ID, sum.RepoTags, sum.RepoDigests, sum.Size, user))
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

// configUser returns the config User of image id, inspecting it once:
// image ids name immutable content. ok is false when the image is gone.
func (s *Store) configUser(ctx context.Context, id string) (user string, ok bool) {
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
func (s *Store) pruneUsers(sums []image.Summary) {
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

// Remove removes the image r names with all its names, and returns its id
// (with an error too when the engine refused); "" and no error when there is
// none. The engine deletes the image id with
// force, which takes every tag and digest along. Its refusal, when a running
// container uses the image or a child image builds on it, is a conflict
// (dockerapi.IsConflict).
func (s *Store) Remove(ctx context.Context, r Ref) (string, error) {
	// Removals of one reference wait for each other: the later ones then
	// find the image gone. While the engine deletes an image's layers, an
	// inspect of it can fail ("layer does not exist"): a removal by
	// another reference (name and id) looks again until it is gone.
	unlock := s.locks.Lock("remove " + r.String())
	defer unlock()
	img, err := s.Lookup(ctx, r)
	for wait := 50 * time.Millisecond; err != nil && wait < 2*time.Second && ctx.Err() == nil; wait *= 2 {
		time.Sleep(wait)
		img, err = s.Lookup(ctx, r)
	}
	if err != nil || img == nil {
		return "", err
	}
	if err := s.d.ImageRemove(ctx, img.ID, true); err != nil {
		switch {
		case dockerapi.IsNotFound(err):
			// Removed concurrently: done all the same.
		case dockerapi.IsConflict(err):
			return img.ID, err
		default:
			// A removal racing with this one can make the engine answer
			// "unrecognized image ID" instead of not found: the image is
			// gone either way, which is what was asked.
			if _, ierr := s.d.ImageInspect(ctx, img.ID); !dockerapi.IsNotFound(ierr) {
				return img.ID, err
			}
		}
	}
	s.usersMu.Lock()
	delete(s.users, img.ID)
	s.usersMu.Unlock()
	return img.ID, nil
}

// ErrPullStalled is what a pull fails with when the engine reported no
// progress for the pull progress timeout.
var ErrPullStalled = errors.New("no progress")

// pull has the engine pull ref, cancelled when the engine reports no
// progress for s.progressTimeout. A report is progress when it is not a
// repeat of its layer's last one (status and bytes).
func (s *Store) pull(ctx context.Context, ref string, auth *registry.AuthConfig) error {
	if s.progressTimeout <= 0 {
		return s.d.ImagePull(ctx, ref, auth, nil)
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stalled := fmt.Errorf("%w for %v, the image pull progress timeout (%w)", ErrPullStalled, s.progressTimeout, context.DeadlineExceeded)
	timer := time.AfterFunc(s.progressTimeout, func() { cancel(stalled) })
	defer timer.Stop()
	last := map[string]dockerapi.PullProgress{}
	read := map[string]int64{} // bytes downloaded, by layer
	err := s.d.ImagePull(pctx, ref, auth, func(p dockerapi.PullProgress) {
		if prev, ok := last[p.Layer]; ok && prev == p {
			return
		}
		last[p.Layer] = p
		if p.Status == "Downloading" && p.Current > read[p.Layer] {
			read[p.Layer] = p.Current
		}
		timer.Reset(s.progressTimeout)
	})
	var bytes int64
	for _, n := range read {
		bytes += n
	}
	if err != nil && context.Cause(pctx) == stalled && ctx.Err() == nil {
		klog.InfoS("Image pull cancelled: no progress", "image", ref, "timeout", s.progressTimeout, "bytesRead", bytes)
		return stalled
	}
	if err == nil {
		klog.V(4).InfoS("Image pulled", "image", ref, "bytesRead", bytes)
	}
	return err
}
