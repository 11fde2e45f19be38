package vk_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/registry"
)

// TestImagePull: images are pulled per imagePullPolicy, with the pod's
// imagePullSecrets as the registry's credentials, from a real registry
// (on 127.0.0.1, behind basic auth): Always with the secret pulls and
// runs; Always without it waits in ErrImagePull/ImagePullBackOff with the
// registry's refusal; IfNotPresent without it runs the image already
// pulled; Never with an image that is not there waits in
// ErrImageNeverPull.
func TestImagePull(t *testing.T) {
	need(t)
	const user, password = "vk", "s3cret"
	reg, err := registry.Start(t.Logf, registry.WithBasicAuth(user, password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	var archive bytes.Buffer
	if _, err := images.BusyboxArchive(&archive, "vk-e2e/busybox:pull"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	repo := "vk-e2e/busybox:" + runID
	if err := reg.PushArchive(ctx, archive.Bytes(), repo); err != nil {
		t.Fatal(err)
	}
	ref := reg.Host + "/" + repo
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = engine.ImageRemove(ctx, ref, true)
	})

	ns := namespace(t)
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{reg.Host: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password))}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred"}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: cfg},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	podOf := func(name, image string, policy v1.PullPolicy, secret bool) *v1.Pod {
		c := busybox("c", "sleep 3600")
		c.Image, c.ImagePullPolicy = image, policy
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, Containers: []v1.Container{c}}}
		if secret {
			p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}}
		}
		return createPod(t, p)
	}
	waiting := func(p *v1.Pod) (reason, message string) {
		if cs := containerStatus(p, "c"); cs != nil && cs.State.Waiting != nil {
			return cs.State.Waiting.Reason, cs.State.Waiting.Message
		}
		return "", ""
	}

	// Without credentials first, so that nothing is in the engine yet.
	denied := podOf("denied", ref, v1.PullAlways, false)
	p := waitPod(t, ns, denied.Name, "the pull refused", time.Minute, func(p *v1.Pod) bool {
		r, _ := waiting(p)
		return r == "ErrImagePull" || r == "ImagePullBackOff"
	})
	waitPod(t, ns, denied.Name, "the pull backed off", time.Minute, func(p *v1.Pod) bool {
		r, _ := waiting(p)
		return r == "ImagePullBackOff"
	})
	// The registry's refusal reaches the user, in the Failed event (and
	// the ErrImagePull message).
	waitFor(t, "a Failed event with the registry's refusal", 30*time.Second, func() (bool, string) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + denied.Name + ",reason=Failed"})
		if err != nil {
			return false, err.Error()
		}
		var msgs []string
		for _, e := range evs.Items {
			// The engine's words: it answers the registry's Basic challenge
			// only with credentials, and has none.
			if strings.Contains(e.Message, "no basic auth credentials") || strings.Contains(e.Message, "authentication required") {
				t.Logf("event: %s", e.Message)
				return true, ""
			}
			msgs = append(msgs, e.Message)
		}
		return false, strings.Join(msgs, "; ")
	})
	if cs := containerStatus(p, "c"); cs.State.Running != nil {
		t.Fatalf("running without credentials: %s", podSummary(p))
	}

	pulled := podOf("pulled", ref, v1.PullAlways, true)
	p = waitPod(t, ns, pulled.Name, "running from the pulled image", 2*time.Minute, func(p *v1.Pod) bool {
		cs := containerStatus(p, "c")
		return cs != nil && cs.State.Running != nil
	})
	cs := containerStatus(p, "c")
	if !strings.Contains(cs.ImageID, "sha256:") || cs.Image == "" {
		t.Errorf("image %q, imageID %q", cs.Image, cs.ImageID)
	}
	if n := probeEvents(t, ns, pulled.Name, "Pulled", "Successfully pulled image"); n == 0 {
		t.Error("no Pulled event")
	}

	present := podOf("present", ref, v1.PullIfNotPresent, false)
	waitPod(t, ns, present.Name, "IfNotPresent: running without a pull", time.Minute, func(p *v1.Pod) bool {
		cs := containerStatus(p, "c")
		return cs != nil && cs.State.Running != nil
	})
	if n := probeEvents(t, ns, present.Name, "Pulled", "Container image"); n == 0 {
		t.Error(`no "Container image … already present on machine" event`)
	}

	never := podOf("never", reg.Host+"/vk-e2e/absent:"+runID, v1.PullNever, false)
	waitPod(t, ns, never.Name, "Never: ErrImageNeverPull", time.Minute, func(p *v1.Pod) bool {
		r, _ := waiting(p)
		return r == "ErrImageNeverPull"
	})
}
