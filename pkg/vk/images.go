package vk

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Waiting reasons kubelet reports for images.
const (
	reasonErrImagePull      = "ErrImagePull"
	reasonImagePullBackOff  = "ImagePullBackOff"
	reasonErrImageNeverPull = "ErrImageNeverPull"
	reasonInvalidImageName  = "InvalidImageName"
)

// ensureImage makes c's image present as its imagePullPolicy says, and
// returns the image's id to create the container from. On failure it
// returns the waiting reason to report.
func (w *podWorker) ensureImage(ctx context.Context, c *v1.Container, sb *runtimeapi.PodSandboxConfig) (string, *waiting) {
	pod := w.pod()
	if _, err := reference.ParseNormalizedNamed(c.Image); err != nil {
		return "", &waiting{reason: reasonInvalidImageName, message: fmt.Sprintf("Failed to apply default image tag %q: %v", c.Image, err)}
	}
	spec := &runtimeapi.ImageSpec{Image: c.Image, UserSpecifiedImage: c.Image, Annotations: pod.Annotations}
	policy := c.ImagePullPolicy
	if policy == "" {
		policy = v1.PullIfNotPresent
		if ref, err := reference.ParseNormalizedNamed(c.Image); err == nil {
			if t, ok := ref.(reference.Tagged); (!ok || t.Tag() == "latest") && !isDigested(ref) {
				policy = v1.PullAlways
			}
		}
	}
	if policy != v1.PullAlways {
		st, err := w.p.rt.Images.ImageStatus(ctx, spec, false)
		if err != nil {
			return "", &waiting{reason: reasonErrImagePull, message: fmt.Sprintf("image status of %q: %v", c.Image, err)}
		}
		if st.GetImage() != nil {
			w.imageEvent(c, false, "Pulled", fmt.Sprintf("Container image %q already present on machine", c.Image))
			return st.GetImage().GetId(), nil
		}
		if policy == v1.PullNever {
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
			w.imageEvent(c, true, "ErrImageNeverPull", msg)
			return "", &waiting{reason: reasonErrImageNeverPull, message: msg}
		}
	}
	key := "pull/" + string(pod.UID) + "/" + c.Image
	if ok, wait := w.p.backoff.retryReady(key); !ok {
		w.wakeAfter(wait)
		msg := fmt.Sprintf("Back-off pulling image %q", c.Image)
		w.imageEvent(c, false, "BackOff", msg)
		return "", &waiting{reason: reasonImagePullBackOff, message: msg}
	}
	auths, err := w.pullAuths(c.Image)
	if err != nil {
		klog.InfoS("Image pull secrets unusable; pulling without them", "pod", klog.KObj(pod), "image", c.Image, "err", err)
	}
	if len(auths) == 0 {
		auths = []*runtimeapi.AuthConfig{nil}
	}
	w.imageEvent(c, false, "Pulling", fmt.Sprintf("Pulling image %q", c.Image))
	start := w.p.clock.Now()
	var lastErr error
	for _, auth := range auths {
		ref, err := w.p.rt.Images.PullImage(ctx, spec, auth, sb)
		if err == nil {
			w.p.backoff.reset(key)
			took := w.p.clock.Since(start).Round(time.Millisecond)
			klog.V(2).InfoS("Pulled image", "pod", klog.KObj(pod), "image", c.Image, "ref", ref, "took", took)
			w.imageEvent(c, false, "Pulled", fmt.Sprintf("Successfully pulled image %q in %v", c.Image, took))
			return ref, nil
		}
		lastErr = err
	}
	w.p.backoff.failed(key, w.p.clock.Now())
	msg := fmt.Sprintf("Failed to pull image %q: %v", c.Image, lastErr)
	w.imageEvent(c, true, "Failed", msg)
	return "", &waiting{reason: reasonErrImagePull, message: msg}
}

func isDigested(ref reference.Named) bool {
	_, ok := ref.(reference.Digested)
	return ok
}

// pullAuths turns the pod's imagePullSecrets into the CRI credentials that
// match image's registry, best match first (kubelet tries each in turn).
func (w *podWorker) pullAuths(image string) ([]*runtimeapi.AuthConfig, error) {
	pod := w.pod()
	if len(pod.Spec.ImagePullSecrets) == 0 {
		return nil, nil
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, err
	}
	// docker.io/library/x is matched as index.docker.io, as Docker's own
	// config names it.
	host := reference.Domain(named)
	repo := host + "/" + reference.Path(named)
	var out []*runtimeapi.AuthConfig
	var errs []string
	bestLen := map[*runtimeapi.AuthConfig]int{}
	for _, ref := range pod.Spec.ImagePullSecrets {
		s, err := w.p.objects.secret(pod.Namespace, ref.Name)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		entries, err := dockerConfigEntries(s)
		if err != nil {
			errs = append(errs, fmt.Sprintf("secret %s: %v", ref.Name, err))
			continue
		}
		for key, e := range entries {
			n := matchRegistry(key, repo)
			if n < 0 {
				continue
			}
			a := &runtimeapi.AuthConfig{Username: e.Username, Password: e.Password, Auth: e.Auth,
				ServerAddress: host, IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
			if a.Username == "" && a.Auth != "" {
				if dec, err := base64.StdEncoding.DecodeString(a.Auth); err == nil {
					if u, p, ok := strings.Cut(string(dec), ":"); ok {
						a.Username, a.Password = u, p
					}
				}
			}
			bestLen[a] = n
			out = append(out, a)
		}
	}
	// Longest (most specific) match first.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && bestLen[out[j]] > bestLen[out[j-1]]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

type dockerConfigEntry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// dockerConfigEntries reads a kubernetes.io/dockerconfigjson or
// kubernetes.io/dockercfg secret.
func dockerConfigEntries(s *v1.Secret) (map[string]dockerConfigEntry, error) {
	switch s.Type {
	case v1.SecretTypeDockerConfigJson:
		var cfg struct {
			Auths map[string]dockerConfigEntry `json:"auths"`
		}
		if err := json.Unmarshal(s.Data[v1.DockerConfigJsonKey], &cfg); err != nil {
			return nil, err
		}
		return cfg.Auths, nil
	case v1.SecretTypeDockercfg:
		var cfg map[string]dockerConfigEntry
		if err := json.Unmarshal(s.Data[v1.DockerConfigKey], &cfg); err != nil {
			return nil, err
		}
		return cfg, nil
	}
	return nil, fmt.Errorf("type %s is not a docker config", s.Type)
}

// matchRegistry reports how well a docker config key (a registry, maybe
// with scheme and path) matches repo (host/path), as the length of the
// match, or -1 when it does not.
func matchRegistry(key, repo string) int {
	k := key
	if i := strings.Index(k, "://"); i >= 0 {
		k = k[i+3:]
	}
	k = strings.TrimSuffix(k, "/")
	// Docker's own name for Docker Hub.
	switch k {
	case "index.docker.io/v1", "index.docker.io", "registry-1.docker.io":
		k = "docker.io"
	}
	if repo == k || strings.HasPrefix(repo, k+"/") {
		return len(k)
	}
	return -1
}

// imageEvent records kubelet's image events (Pulling, Pulled, Failed,
// BackOff, ErrImageNeverPull) on the container.
func (w *podWorker) imageEvent(c *v1.Container, warn bool, reason, msg string) {
	w.p.containerEvent(w.pod(), c.Name, warn, reason, msg)
}
