package images

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/distribution/reference"
	"github.com/moby/moby/api/types/image"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Ref is a parsed reference from a request.
//
// References are normalized as kubelet and containerd name them ("busybox"
// means "docker.io/library/busybox:latest"); an image id ("sha256:<64 hex>"
// or the bare 64 hex digits) or an id prefix of at least 6 hex digits is
// accepted wherever an existing image is looked up. A name takes precedence
// over an id prefix, as in the engine.
type Ref struct {
	Raw string
	// Named is the normalized name (tagged, or digested) when the ref can
	// be a name; nil for a full id or a "sha256:" id prefix.
	Named reference.Named
	// ID is "sha256:<64 hex>" when the ref is a full image id.
	ID string
	// IDPrefix is set when the ref can be an image id prefix ("sha256:"
	// and the hex digits as given).
	IDPrefix string
	// Explicit is true when the ref names a tag or a digest itself (and
	// was not given the default tag by normalization).
	Explicit bool
}

func (r Ref) String() string {
	switch {
	case r.Named != nil:
		return r.Named.String()
	case r.ID != "":
		return r.ID
	}
	return r.Raw
}

var (
	// FullIDPattern matches a full image id, with or without "sha256:".
	FullIDPattern  = regexp.MustCompile(`^(?:sha256:)?([a-f0-9]{64})$`)
	shortIDPattern = regexp.MustCompile(`^(sha256:)?([a-f0-9]{6,63})$`)
)

// ParseRef parses and normalizes ref; a bad ref gives an error wrapping
// sandbox.ErrInvalid.
func ParseRef(ref string) (Ref, error) {
	if ref == "" {
		return Ref{}, fmt.Errorf("%w: no image reference", sandbox.ErrInvalid)
	}
	r := Ref{Raw: ref}
	if m := FullIDPattern.FindStringSubmatch(ref); m != nil {
		r.ID = "sha256:" + m[1]
		return r, nil
	}
	if m := shortIDPattern.FindStringSubmatch(ref); m != nil {
		r.IDPrefix = "sha256:" + m[2]
		if m[1] != "" {
			return r, nil // "sha256:abc…" is never a name
		}
	}
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return Ref{}, fmt.Errorf("%w: image reference %q: %v", sandbox.ErrInvalid, ref, err)
	}
	r.Named = named
	if n, err := reference.ParseNormalizedNamed(ref); err == nil && !reference.IsNameOnly(n) {
		r.Explicit = true
	}
	return r, nil
}

// ParseSpec parses the image of a request's ImageSpec.
func ParseSpec(spec *runtime.ImageSpec) (Ref, error) {
	return ParseRef(strings.TrimSpace(spec.GetImage()))
}

// ToCRI builds the CRI image from the engine's facts: the id is the
// engine's image id ("sha256:…"), repo tags and digests are normalized
// ("docker.io/library/busybox:latest", "docker.io/library/busybox@sha256:…").
func ToCRI(id string, tags, digests []string, size int64, user string) *runtime.Image {
	img := &runtime.Image{
		Id:          id,
		RepoTags:    NormalizeRefs(tags, false),
		RepoDigests: NormalizeRefs(digests, true),
		Spec:        &runtime.ImageSpec{Image: id},
	}
	if size > 0 {
		img.Size = uint64(size)
	}
	img.Uid, img.Username = criUser(user)
	return img
}

// InspectToCRI is ToCRI of an inspected image.
func InspectToCRI(img *image.InspectResponse) *runtime.Image {
	user := ""
	if img.Config != nil {
		user = img.Config.User
	}
	return ToCRI(img.ID, img.RepoTags, img.RepoDigests, img.Size, user)
}

// NormalizeRefs normalizes the engine's familiar names ("busybox:latest"),
// drops "<none>" placeholders and anything unparsable, and sorts them.
// digests selects digest references (true) or tags (false).
func NormalizeRefs(refs []string, digests bool) []string {
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

// criUser maps the image config's User ("1002", "1003:1004", "www-data",
// "www-data:1004") to the CRI uid (numeric user) or username.
func criUser(user string) (*runtime.Int64Value, string) {
	u, _, _ := strings.Cut(user, ":")
	if u == "" {
		return nil, ""
	}
	if uid, err := strconv.ParseInt(u, 10, 64); err == nil {
		return &runtime.Int64Value{Value: uid}, ""
	}
	return nil, u
}
