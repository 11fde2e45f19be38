package vk

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

func TestExpandSubPathExpr(t *testing.T) {
	env := map[string]string{"POD_NAME": "web-0", "NS": "prod", "EMPTY": ""}
	for expr, want := range map[string]string{
		"$(POD_NAME)":            "web-0",
		"logs/$(NS)/$(POD_NAME)": "logs/prod/web-0",
		"$$(POD_NAME)":           "$(POD_NAME)",
		"plain":                  "plain",
		"a$b":                    "a$b",
	} {
		if got, err := expandSubPathExpr(expr, env); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", expr, got, err, want)
		}
	}
	// As kubelet: an unknown or empty variable fails, all named once.
	if _, err := expandSubPathExpr("$(NOPE)/$(EMPTY)/$(NOPE)/$(POD_NAME)", env); err == nil || err.Error() != "missing value for EMPTY, NOPE" {
		t.Errorf("missing variables: %v", err)
	}
}

func TestMakeMountsSubPath(t *testing.T) {
	dir := t.TempDir()
	vols := map[string]volume{"data": {hostPath: dir}, "cfg": {hostPath: t.TempDir(), readOnly: true}}
	env := map[string]string{"POD_NAME": "web-0", "UP": "..", "ABS": "/etc"}
	c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{
		{Name: "data", MountPath: "/data"},
		{Name: "data", MountPath: "/mine", SubPathExpr: "pods/$(POD_NAME)"},
		{Name: "data", MountPath: "/fixed", SubPath: "fixed"},
		{Name: "cfg", MountPath: "/cfg", SubPath: "missing"},
	}}
	mounts, err := makeMounts(c, vols, env)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{dir, dir + "/pods/web-0", dir + "/fixed", vols["cfg"].hostPath + "/missing"}
	for i, m := range mounts {
		if m.HostPath != want[i] {
			t.Errorf("mount %s from %q, want %q", m.ContainerPath, m.HostPath, want[i])
		}
	}
	if fi, err := os.Stat(dir + "/pods/web-0"); err != nil || !fi.IsDir() {
		t.Errorf("subPathExpr folder not made: %v", err)
	}
	if _, err := os.Stat(vols["cfg"].hostPath + "/missing"); !os.IsNotExist(err) {
		t.Errorf("a folder was made in a read-only volume: %v", err)
	}

	for _, tc := range []struct {
		m    v1.VolumeMount
		want string
	}{
		{v1.VolumeMount{Name: "data", MountPath: "/x", SubPathExpr: "$(UP)/x"}, "unable to provision SubPath `../x`: must not contain '..'"},
		{v1.VolumeMount{Name: "data", MountPath: "/x", SubPath: "a/../../b"}, "unable to provision SubPath `a/../../b`: must not contain '..'"},
		{v1.VolumeMount{Name: "data", MountPath: "/x", SubPathExpr: "$(ABS)"}, "error SubPath `/etc` must not be an absolute path"},
		{v1.VolumeMount{Name: "data", MountPath: "/x", SubPathExpr: "$(POD_IP)"}, "missing value for POD_IP"},
	} {
		c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{tc.m}}
		if _, err := makeMounts(c, vols, env); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.m, err, tc.want)
		}
	}
}

// TestWorkerSubPathExpr checks that subPathExpr is expanded from the
// container's environment (downward API included), and that a missing
// variable is the container's CreateContainerConfigError.
func TestWorkerSubPathExpr(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Volumes = []v1.Volume{{Name: "logs", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	a := &pod.Spec.Containers[0]
	a.Env = append(a.Env, v1.EnvVar{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	a.VolumeMounts = []v1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: "$(POD_NAME)/$(FROM_CM)"}}
	b := &pod.Spec.Containers[1]
	b.VolumeMounts = []v1.VolumeMount{{Name: "logs", MountPath: "/logs", SubPathExpr: "$(POD_NAME)"}}
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	st := e.last(t).Status
	if cs := containerStatus(st, "a"); cs.State.Running == nil {
		t.Fatalf("a: %+v", cs.State)
	}
	// The fake runtime keeps no mounts: the folder made for a's is there.
	sub := filepath.Join(podDir(e.p.cfg.StateDir, pod.UID), "volumes", "empty-dir", "logs", "p", "from-cm")
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Errorf("a's subPath folder: %v", err)
	}
	// b has no POD_NAME in its environment.
	if cs := containerStatus(st, "b"); cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCreateConfigError ||
		cs.State.Waiting.Message != "missing value for POD_NAME" {
		t.Errorf("b: %+v", cs.State)
	}
}

// TestMakeSubPath: a missing subPath is made with its volume's mode, set
// bits included, whatever the umask; a symbolic link on the way is
// refused rather than followed.
func TestMakeSubPath(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	root := t.TempDir()
	want := os.ModeSetgid | os.ModeSticky | 0o777
	if err := os.Chmod(root, want); err != nil {
		t.Fatal(err)
	}
	if err := makeSubPath(root, "a/b"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"a", "a/b"} {
		fi, err := os.Stat(filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() &^ os.ModeDir; got != want {
			t.Errorf("%s: mode %v, want %v", d, got, want)
		}
	}
	if err := makeSubPath(root, "a/b"); err != nil {
		t.Errorf("again: %v", err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := makeSubPath(root, "link/escape"); err == nil {
		t.Error("made a subPath through a symbolic link")
	}
	if _, err := os.Stat(filepath.Join(outside, "escape")); !os.IsNotExist(err) {
		t.Errorf("a folder was made outside the volume: %v", err)
	}
}
