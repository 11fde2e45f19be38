package vk

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
)

func TestVerifyRunAsNonRoot(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	yes, no := true, false
	pod := func(psc *v1.PodSecurityContext, csc *v1.SecurityContext) (*v1.Pod, *v1.Container) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
			Spec: v1.PodSpec{SecurityContext: psc, Containers: []v1.Container{{Name: "c", SecurityContext: csc}}}}
		return p, &p.Spec.Containers[0]
	}
	const where = `(pod: "p_ns(u1)", container: c)`
	for _, tc := range []struct {
		name string
		psc  *v1.PodSecurityContext
		csc  *v1.SecurityContext
		user imageUser
		want string // "" for no error
	}{
		{name: "not asked", user: imageUser{uid: i64(0)}},
		{name: "allowed by the container", psc: &v1.PodSecurityContext{RunAsNonRoot: &yes}, csc: &v1.SecurityContext{RunAsNonRoot: &no},
			user: imageUser{uid: i64(0)}},
		{name: "runAsUser 0", psc: &v1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: i64(0)},
			want: "container's runAsUser breaks non-root policy " + where},
		{name: "container's runAsUser 0 over the pod's", psc: &v1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: i64(1000)},
			csc: &v1.SecurityContext{RunAsUser: i64(0)}, want: "container's runAsUser breaks non-root policy " + where},
		{name: "runAsUser wins over the image", csc: &v1.SecurityContext{RunAsNonRoot: &yes, RunAsUser: i64(1000)},
			user: imageUser{uid: i64(0)}},
		{name: "image root", csc: &v1.SecurityContext{RunAsNonRoot: &yes}, user: imageUser{uid: i64(0)},
			want: "container has runAsNonRoot and image will run as root " + where},
		{name: "image user by name", csc: &v1.SecurityContext{RunAsNonRoot: &yes}, user: imageUser{name: "nobody"},
			want: "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root " + where},
		{name: "image non-root", csc: &v1.SecurityContext{RunAsNonRoot: &yes}, user: imageUser{uid: i64(1000)}},
		{name: "image uid out of range", csc: &v1.SecurityContext{RunAsNonRoot: &yes}, user: imageUser{uid: i64(1 << 40)},
			want: "container has runAsNonRoot and image has an invalid user id (1099511627776). (Must be 1-(2147483647))"},
	} {
		p, c := pod(tc.psc, tc.csc)
		err := verifyRunAsNonRoot(p, c, tc.user)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestImageUserOf(t *testing.T) {
	if u := imageUserOf(nil); u.uid == nil || *u.uid != 0 {
		t.Errorf("no image: %+v, want root", u)
	}
	if u := imageUserOf(&runtimeapi.Image{}); u.uid == nil || *u.uid != 0 {
		t.Errorf("no user: %+v, want root", u)
	}
	if u := imageUserOf(&runtimeapi.Image{Uid: &runtimeapi.Int64Value{Value: 7}, Username: "x"}); u.uid == nil || *u.uid != 7 || u.name != "" {
		t.Errorf("uid 7: %+v", u)
	}
	if u := imageUserOf(&runtimeapi.Image{Username: "app"}); u.uid != nil || u.name != "app" {
		t.Errorf("user app: %+v", u)
	}
}

// TestWorkerRunAsNonRoot checks that a container that must run as non-root
// and whose image runs as root waits with CreateContainerConfigError, and
// starts once its image runs as another user (the retry of config errors).
func TestWorkerRunAsNonRoot(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	pod.Spec.InitContainers = nil
	yes := true
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: &yes}
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	cs := containerStatus(e.last(t).Status, "a")
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCreateConfigError ||
		cs.State.Waiting.Message != `container has runAsNonRoot and image will run as root (pod: "p_ns(uid-1)", container: a)` {
		t.Fatalf("status %+v", cs.State)
	}
	is := e.p.rt.Images.(*critesting.FakeImageService)
	is.Lock()
	is.Images["busybox"].Uid = &runtimeapi.Int64Value{Value: 1000}
	is.Unlock()
	e.clock.Step(time.Minute)
	w.pass(context.Background())
	if cs := containerStatus(e.last(t).Status, "a"); cs.State.Running == nil {
		t.Fatalf("status with a non-root image: %+v", cs.State)
	}
}
