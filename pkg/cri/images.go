package cri

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/image"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// ImageService is the CRI image service on the Docker Engine's image store.
//
// Images are reported as containerd and kubelet name them: the id is the
// engine's image id ("sha256:…"), repo tags and digests are normalized
// ("docker.io/library/busybox:latest", "docker.io/library/busybox@sha256:…"),
// and PullImage returns the image id as the image ref.
//
// References in requests are normalized the same way ("busybox" means
// "docker.io/library/busybox:latest"); an image id ("sha256:<64 hex>" or the
// bare 64 hex digits) or an id prefix of at least 6 hex digits is accepted
// wherever an existing image is looked up. A name takes precedence over an id
// prefix, as in the engine.
type ImageService struct {
	runtime.UnimplementedImageServiceServer

	d       *dockerapi.Client
	mirrors map[string][]mirrorEndpoint

	pulls imageLocks // serializes pull, tag and untag of one mirror name

	usersMu sync.Mutex
	users   map[string]string // image id → config User; images are immutable

	// onRemove is told of every image RemoveImage removed (by id).
	onRemove func(id string)
}

var _ runtime.ImageServiceServer = (*ImageService)(nil)

// NewImageService returns the image service of engine d, pulling through
// mirrors. Invalid mirror entries are logged and left out: check them with
// ParseMirrors or Mirrors.Validate first.
func NewImageService(d *dockerapi.Client, mirrors Mirrors) *ImageService {
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
	return &ImageService{d: d, mirrors: parsed, users: map[string]string{}}
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
	r, err := parseImageRef(ref)
	if err != nil {
		return ResolvedImage{}, err
	}
	img, err := s.lookup(ctx, r)
	if err != nil {
		return ResolvedImage{}, fmt.Errorf("resolve image %q: %w", ref, err)
	}
	if img == nil {
		return ResolvedImage{}, fmt.Errorf("image %q: %w (pull it first)", r.String(), errNotFound)
	}
	out := ResolvedImage{ID: img.ID, Ref: img.ID}
	if r.named != nil {
		out.Ref = r.named.String()
	}
	if ds := normalizeImageRefs(img.RepoDigests, true); len(ds) > 0 {
		out.RepoDigest = ds[0]
	}
	if img.Config != nil {
		out.User = img.Config.User
	}
	return out, nil
}

// imageRef is a parsed reference from a request.
type imageRef struct {
	raw string
	// named is the normalized name (tagged, or digested) when ref can be a
	// name; nil for a full id or a "sha256:" id prefix.
	named reference.Named
	// id is "sha256:<64 hex>" when ref is a full image id.
	id string
	// idPrefix is set when ref can be an image id prefix ("sha256:" and the
	// hex digits as given).
	idPrefix string
	// explicit is true when ref names a tag or a digest itself (and was not
	// given the default tag by normalization).
	explicit bool
}

func (r imageRef) String() string {
	switch {
	case r.named != nil:
		return r.named.String()
	case r.id != "":
		return r.id
	}
	return r.raw
}

var (
	imageFullIDPattern  = regexp.MustCompile(`^(?:sha256:)?([a-f0-9]{64})$`)
	imageShortIDPattern = regexp.MustCompile(`^(sha256:)?([a-f0-9]{6,63})$`)
)

// parseImageRef parses and normalizes ref; a bad ref gives an error wrapping
// sandbox.ErrInvalid.
func parseImageRef(ref string) (imageRef, error) {
	if ref == "" {
		return imageRef{}, fmt.Errorf("%w: no image reference", sandbox.ErrInvalid)
	}
	r := imageRef{raw: ref}
	if m := imageFullIDPattern.FindStringSubmatch(ref); m != nil {
		r.id = "sha256:" + m[1]
		return r, nil
	}
	if m := imageShortIDPattern.FindStringSubmatch(ref); m != nil {
		r.idPrefix = "sha256:" + m[2]
		if m[1] != "" {
			return r, nil // "sha256:abc…" is never a name
		}
	}
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return imageRef{}, fmt.Errorf("%w: image reference %q: %v", sandbox.ErrInvalid, ref, err)
	}
	r.named = named
	if n, err := reference.ParseNormalizedNamed(ref); err == nil && !reference.IsNameOnly(n) {
		r.explicit = true
	}
	return r, nil
}

// parseImageSpec parses the image of a request's ImageSpec.
func parseImageSpec(spec *runtime.ImageSpec) (imageRef, error) {
	return parseImageRef(strings.TrimSpace(spec.GetImage()))
}

// lookup inspects the image r names: nil and no error when there is none.
// A digest reference that the engine does not know is also looked up under
// its mirrors' names, where a digest pull through a mirror leaves it.
func (s *ImageService) lookup(ctx context.Context, r imageRef) (*image.InspectResponse, error) {
	var candidates []string
	switch {
	case r.id != "":
		candidates = []string{r.id}
	case r.named != nil:
		candidates = []string{r.named.String()}
		if _, ok := r.named.(reference.Digested); ok {
			for _, ep := range s.mirrors[reference.Domain(r.named)] {
				if m, err := ep.rewrite(r.named); err == nil {
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
	if r.idPrefix != "" {
		// The engine takes an unambiguous id prefix without "sha256:".
		img, err := s.d.ImageInspect(ctx, strings.TrimPrefix(r.idPrefix, "sha256:"))
		if err == nil && strings.HasPrefix(img.ID, r.idPrefix) {
			return &img, nil
		}
		if err != nil && !dockerapi.IsNotFound(err) {
			return nil, err
		}
	}
	return nil, nil
}

// toCRIImage builds the CRI image from the engine's facts.
func toCRIImage(id string, tags, digests []string, size int64, user string) *runtime.Image {
	img := &runtime.Image{
		Id:          id,
		RepoTags:    normalizeImageRefs(tags, false),
		RepoDigests: normalizeImageRefs(digests, true),
		Spec:        &runtime.ImageSpec{Image: id},
	}
	if size > 0 {
		img.Size = uint64(size)
	}
	img.Uid, img.Username = imageUser(user)
	return img
}

func inspectToCRIImage(img *image.InspectResponse) *runtime.Image {
	user := ""
	if img.Config != nil {
		user = img.Config.User
	}
	return toCRIImage(img.ID, img.RepoTags, img.RepoDigests, img.Size, user)
}

// normalizeImageRefs normalizes the engine's familiar names ("busybox:latest"),
// drops "<none>" placeholders and anything unparsable, and sorts them.
// digests selects digest references (true) or tags (false).
func normalizeImageRefs(refs []string, digests bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range refs {
		if strings.HasPrefix(s, "<none>") {
			continue
		}
		n, err := reference.ParseNormalizedNamed(s)
		if err != nil {
			continue
		}
		_, isDigest := n.(reference.Digested)
		if isDigest != digests {
			continue
		}
		if !isDigest {
			n = reference.TagNameOnly(n)
		}
		if v := n.String(); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// imageUser maps the image config's User ("1002", "1003:1004", "www-data",
// "www-data:1004") to the CRI uid (numeric user) or username.
func imageUser(user string) (*runtime.Int64Value, string) {
	u, _, _ := strings.Cut(user, ":")
	if u == "" {
		return nil, ""
	}
	if uid, err := strconv.ParseInt(u, 10, 64); err == nil {
		return &runtime.Int64Value{Value: uid}, ""
	}
	return nil, u
}

// imageLocks is a set of mutexes by key, removed when unused.
type imageLocks struct {
	mu    sync.Mutex
	locks map[string]*imageLock
}

type imageLock struct {
	sync.Mutex
	n int
}

// lock locks key and returns its unlock function.
func (k *imageLocks) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*imageLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &imageLock{}
		k.locks[key] = l
	}
	l.n++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.n--; l.n == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
