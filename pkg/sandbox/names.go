// Package sandbox is the pure mapping between CRI and Docker Compose: pod
// sandboxes become Compose projects, CRI containers become services, and
// everything CRI must report back is carried in container labels. It does
// no I/O, so it is golden-tested.
package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// InfraService is the Compose service of a pod's infra (pause) container. A
// CRI container of that name gets a suffixed service name (see ServiceName).
const InfraService = "pod"

// maxProjectName keeps names readable in `docker compose ls` and container
// names well below the engine's limits.
const maxProjectName = 63

// shortHash is a stable, short, lowercase hex digest of parts.
func shortHash(n int, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:n]
}

// sanitize keeps [a-z0-9_-] (lowercased), turns other runs into '-', and
// trims separators at the ends, so the result is a valid Compose name part.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-_")
}

// ProjectName is the Compose project of a pod sandbox: readable from the
// namespace and name, unique by a hash of uid and attempt (so a new attempt of
// the same pod is a new project), and valid for Compose ([a-z0-9][a-z0-9_-]*).
func ProjectName(md *runtime.PodSandboxMetadata) string {
	suffix := shortHash(8, md.GetNamespace(), md.GetName(), md.GetUid(), fmt.Sprint(md.GetAttempt()))
	base := sanitize(md.GetNamespace()) + "-" + sanitize(md.GetName())
	base = strings.Trim(base, "-_")
	if limit := maxProjectName - len(suffix) - 1; len(base) > limit {
		base = strings.TrimRight(base[:limit], "-_")
	}
	if base == "" {
		return "pod-" + suffix
	}
	return base + "-" + suffix
}

// ServiceName is the Compose service of a CRI container. Names that are not
// already valid service names, or that collide with the infra service, get a
// hash suffix so that two different CRI names never share a service. A name
// that already ends like such a suffix gets one too, or "pod-53b06c" would
// share the service of "pod".
func ServiceName(containerName string) string {
	s := sanitize(containerName)
	if s == containerName && s != InfraService && s != "" && !hashSuffix.MatchString(s) {
		return s
	}
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-_")
	}
	if s == "" {
		s = "container"
	}
	return s + "-" + shortHash(6, containerName)
}

// hashSuffix is how the names ServiceName suffixes end.
var hashSuffix = regexp.MustCompile(`-[0-9a-f]{6}$`)

// ContainerName is the engine name of a container: Compose's
// <project>-<service>-<number> with the CRI attempt as a final part, since
// the engine keeps dead attempts beside the live one.
func ContainerName(project, service string, attempt uint32) string {
	return fmt.Sprintf("%s-%s-1-%d", project, service, attempt)
}
