package vk

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
)

func TestMatchRegistry(t *testing.T) {
	for _, tc := range []struct {
		key, repo string
		want      int
	}{
		{"https://index.docker.io/v1/", "docker.io/library/busybox", len("docker.io")},
		{"registry.example.com", "registry.example.com/team/app", len("registry.example.com")},
		{"registry.example.com/team", "registry.example.com/team/app", len("registry.example.com/team")},
		{"registry.example.com/other", "registry.example.com/team/app", -1},
		{"registry.example.com:5000", "registry.example.com/team/app", -1},
		{"http://127.0.0.1:5000", "127.0.0.1:5000/x", len("127.0.0.1:5000")},
	} {
		if got := matchRegistry(tc.key, tc.repo); got != tc.want {
			t.Errorf("matchRegistry(%q, %q) = %d, want %d", tc.key, tc.repo, got, tc.want)
		}
	}
}

func TestPullAuths(t *testing.T) {
	e := newTestEnv(t)
	e.p.objects.(*fakeObjects).secrets["ns/regcred"] = &v1.Secret{
		Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(`{"auths":{
			"registry.example.com":{"auth":"dXNlcjpwYXNz"},
			"registry.example.com/team":{"username":"teamuser","password":"teampass"},
			"other.example.com":{"username":"x","password":"y"}}}`)},
	}
	pod := testPod()
	pod.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "regcred"}, {Name: "missing"}}
	w := newPodWorker(e.p, pod)
	auths, err := w.pullAuths("registry.example.com/team/app:1")
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing secret not reported: %v", err)
	}
	if len(auths) != 2 || auths[0].Username != "teamuser" || auths[1].Username != "user" || auths[1].Password != "pass" ||
		auths[0].ServerAddress != "registry.example.com" {
		t.Fatalf("auths %v", auths)
	}
	if auths, _ := w.pullAuths("busybox"); len(auths) != 0 {
		t.Errorf("Docker Hub image got %v", auths)
	}
}

func TestEnsureImagePolicies(t *testing.T) {
	e := newTestEnv(t)
	w := newPodWorker(e.p, testPod())
	c := &v1.Container{Name: "c", Image: "absent:1", ImagePullPolicy: v1.PullNever}
	if _, wr := w.ensureImage(context.Background(), c, nil); wr == nil || wr.reason != reasonErrImageNeverPull {
		t.Errorf("Never, absent: %+v", wr)
	}
	c.Image, c.ImagePullPolicy = "busybox", v1.PullNever
	if ref, wr := w.ensureImage(context.Background(), c, nil); wr != nil || ref == "" {
		t.Errorf("Never, present: %q %+v", ref, wr)
	}
	is := e.p.rt.Images.(*critesting.FakeImageService)
	is.InjectError("PullImage", errors.New("registry down"))
	c.Image, c.ImagePullPolicy = "new:1", v1.PullIfNotPresent
	if _, wr := w.ensureImage(context.Background(), c, nil); wr == nil || wr.reason != reasonErrImagePull || !strings.Contains(wr.message, "registry down") {
		t.Errorf("IfNotPresent, pull fails: %+v", wr)
	}
	if _, wr := w.ensureImage(context.Background(), c, nil); wr == nil || wr.reason != reasonImagePullBackOff {
		t.Errorf("right after a failed pull: %+v", wr)
	}
	e.clock.Step(backoffInitial)
	if ref, wr := w.ensureImage(context.Background(), c, nil); wr != nil || ref == "" {
		t.Errorf("after the back-off: %q %+v", ref, wr)
	}
	if _, wr := w.ensureImage(context.Background(), &v1.Container{Name: "c", Image: "not a valid reference"}, nil); wr == nil || wr.reason != reasonInvalidImageName {
		t.Errorf("invalid name: %+v", wr)
	}
}
