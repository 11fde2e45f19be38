package images

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/distribution/reference"
)

// Mirrors maps a registry host ("registry.k8s.io", "gcr.io", "docker.io") to
// the mirror endpoints to pull its images from, tried in order before the
// registry itself, like containerd's hosts.toml mirrors. An endpoint is
// "host[:port][/prefix]" with an optional "http://" or "https://" scheme and
// an optional leading "/v2" in the path (both accepted for familiarity and
// ignored: the engine picks the protocol itself, HTTPS first, falling back
// to plain HTTP only for registries it considers insecure: 127.0.0.0/8 and
// the engine's insecure-registries setting).
//
// A pull of registry.k8s.io/pause:3.9 with the mirror "127.0.0.1:5000/k8s"
// pulls 127.0.0.1:5000/k8s/pause:3.9, names the image
// registry.k8s.io/pause:3.9 and drops the mirror's name, so that the image is
// reported under the name that was asked for only. Docker Hub images keep
// their "library/" path component on the mirror (busybox is
// <mirror>/library/busybox), as registry mirrors expect.
//
// Credentials that come with a pull request are meant for the requested
// registry and are never sent to a mirror: mirrors are pulled anonymously.
type Mirrors map[string][]string

// mirrorEndpoint is a parsed mirror endpoint: the registry host (with port)
// and the repository path prefix to put before the image's path.
type mirrorEndpoint struct {
	host   string // "127.0.0.1:5000"
	prefix string // "" or "k8s/mirror"
}

func (e mirrorEndpoint) String() string {
	if e.prefix == "" {
		return e.host
	}
	return e.host + "/" + e.prefix
}

// rewrite returns the name of ref (a normalized, tagged or digested
// reference) on this mirror: the same path, tag and digest under the
// mirror's host and prefix.
func (e mirrorEndpoint) rewrite(ref reference.Named) (reference.Named, error) {
	name := e.host + "/"
	if e.prefix != "" {
		name += e.prefix + "/"
	}
	name += reference.Path(ref)
	n, err := reference.ParseNamed(name)
	if err != nil {
		return nil, fmt.Errorf("mirror name %q for %q: %w", name, ref.String(), err)
	}
	if d, ok := ref.(reference.Digested); ok {
		return reference.WithDigest(n, d.Digest())
	}
	if t, ok := ref.(reference.Tagged); ok {
		return reference.WithTag(n, t.Tag())
	}
	return n, nil
}

// ParseMirrors parses mirror flag values, each "REGISTRY=ENDPOINT[,ENDPOINT…]"
// (several registries may be given in one value, separated by ";"), such as
// "registry.k8s.io=http://127.0.0.1:5000,http://other:5000". Endpoints of a
// registry named twice are appended in order. Empty values are ignored.
func ParseMirrors(spec []string) (Mirrors, error) {
	m := Mirrors{}
	for _, value := range spec {
		for _, item := range strings.Split(value, ";") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			reg, eps, ok := strings.Cut(item, "=")
			if !ok {
				return nil, fmt.Errorf("registry mirror %q: want REGISTRY=ENDPOINT[,ENDPOINT...]", item)
			}
			key, err := normalizeRegistryHost(strings.TrimSpace(reg))
			if err != nil {
				return nil, fmt.Errorf("registry mirror %q: %w", item, err)
			}
			var list []string
			for _, ep := range strings.Split(eps, ",") {
				ep = strings.TrimSpace(ep)
				if ep == "" {
					continue
				}
				if _, err := parseMirrorEndpoint(ep); err != nil {
					return nil, fmt.Errorf("registry mirror %q: %w", item, err)
				}
				list = append(list, ep)
			}
			if len(list) == 0 {
				return nil, fmt.Errorf("registry mirror %q: no endpoint", item)
			}
			m[key] = append(m[key], list...)
		}
	}
	return m, nil
}

// Validate checks every registry host and endpoint, naming the first bad one.
func (m Mirrors) Validate() error {
	_, err := m.parse()
	return err
}

// String lists the mirrors as ParseMirrors reads them, registries sorted.
func (m Mirrors) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+strings.Join(m[k], ","))
	}
	return strings.Join(parts, ";")
}

// parse validates m and returns the endpoints by normalized registry host.
func (m Mirrors) parse() (map[string][]mirrorEndpoint, error) {
	out := map[string][]mirrorEndpoint{}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // deterministic: first error, and order of merged aliases
	for _, k := range keys {
		host, err := normalizeRegistryHost(k)
		if err != nil {
			return nil, fmt.Errorf("registry mirror for %q: %w", k, err)
		}
		for _, raw := range m[k] {
			ep, err := parseMirrorEndpoint(raw)
			if err != nil {
				return nil, fmt.Errorf("registry mirror for %q: %w", k, err)
			}
			if ep.host == host && ep.prefix == "" {
				continue // a registry is not its own mirror: it is tried last anyway
			}
			out[host] = append(out[host], ep)
		}
	}
	return out, nil
}

// mirrorHostPattern matches a whole registry host with an optional port.
var mirrorHostPattern = regexp.MustCompile(`^(?:` + reference.DomainRegexp.String() + `)$`)

// normalizeRegistryHost checks a registry host ("gcr.io", "127.0.0.1:5000",
// "[::1]:5000", "localhost") and maps Docker Hub's aliases to "docker.io", the
// domain that normalized references carry.
func normalizeRegistryHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty registry host")
	}
	if strings.Contains(h, "://") {
		return "", fmt.Errorf("registry %q: want a host such as registry.k8s.io, without a scheme", h)
	}
	if !mirrorHostPattern.MatchString(h) {
		return "", fmt.Errorf("registry %q is not a valid registry host", h)
	}
	switch h {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io", nil
	}
	return h, nil
}

// parseMirrorEndpoint parses "[http[s]://]host[:port][/v2][/prefix]".
func parseMirrorEndpoint(raw string) (mirrorEndpoint, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return mirrorEndpoint{}, errors.New("empty mirror endpoint")
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return mirrorEndpoint{}, fmt.Errorf("mirror endpoint %q: %w", raw, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return mirrorEndpoint{}, fmt.Errorf("mirror endpoint %q: scheme %q: want http or https", raw, u.Scheme)
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return mirrorEndpoint{}, fmt.Errorf("mirror endpoint %q: want [http[s]://]host[:port][/prefix], without credentials, query or fragment", raw)
		}
		s = u.Host + u.Path
	}
	host, path, _ := strings.Cut(s, "/")
	if host == "" {
		return mirrorEndpoint{}, fmt.Errorf("mirror endpoint %q: no host", raw)
	}
	if !mirrorHostPattern.MatchString(host) {
		return mirrorEndpoint{}, fmt.Errorf("mirror endpoint %q: %q is not a valid registry host", raw, host)
	}
	// Without a dot or a port the engine would read "mirror/x" as the Docker
	// Hub repository mirror/x, not as a registry.
	if host != "localhost" && !strings.ContainsAny(host, ".:") {
		return mirrorEndpoint{}, fmt.Errorf("mirror endpoint %q: host %q needs a domain (with a dot) or a port to be taken for a registry", raw, host)
	}
	path = strings.Trim(path, "/")
	if path == "v2" {
		path = ""
	} else if rest, ok := strings.CutPrefix(path, "v2/"); ok {
		path = rest
	}
	ep := mirrorEndpoint{host: host, prefix: path}
	if path != "" {
		// The prefix must be repository path components: try it on a name.
		if _, err := reference.ParseNamed(host + "/" + path + "/x"); err != nil {
			return mirrorEndpoint{}, fmt.Errorf("mirror endpoint %q: path prefix %q is not a valid repository path: %v", raw, path, err)
		}
	}
	return ep, nil
}
