package vk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"A": "a", "B": "b"}
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)-$(B)":      "a-b",
		"$$(A)":          "$(A)",
		"$(MISSING)":     "$(MISSING)",
		"$(A":            "$(A",
		"cost $5 $(A)":   "cost $5 a",
		"end$":           "end$",
		"$(A)$(A)$$$(B)": "aa$b",
		"$(A $$":         "$(A $",
		"$(A $(B)":       "$(A $(B)",
		"$(A)$":          "a$",
		"$é$(B)":         "$éb",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMakeEnv(t *testing.T) {
	src := &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{"ns/cfg": {Data: map[string]string{"k": "v", "bad-key": "x", "b": "2"}}},
		secrets:    map[string]*v1.Secret{"ns/sec": {Data: map[string][]byte{"pw": []byte("s3cret")}}},
	}
	yes := true
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "x"}},
		Spec: v1.PodSpec{NodeName: "node1"}}
	c := &v1.Container{
		Name:    "c",
		EnvFrom: []v1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		Env: []v1.EnvVar{
			{Name: "PW", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "pw"}}},
			{Name: "OPT", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "pw", Optional: &yes}}},
			{Name: "NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "NS", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "UID", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
			{Name: "APP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
			{Name: "IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "HOST", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.hostIP"}}},
			{Name: "NODE", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "URL", Value: "http://$(IP):80/$(CM_k)"},
		},
	}
	kv, err := makeEnv(pod, c, podIPs{podIPs: []string{"10.0.0.9"}, hostIPs: []string{"192.0.2.1"}}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	for _, e := range kv {
		got[e.Key] = string(e.Value)
		order = append(order, e.Key)
	}
	want := map[string]string{"CM_k": "v", "CM_b": "2", "PW": "s3cret", "NAME": "p", "NS": "ns", "UID": "u1", "APP": "x",
		"IP": "10.0.0.9", "HOST": "192.0.2.1", "NODE": "node1", "URL": "http://10.0.0.9:80/v"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["OPT"]; ok {
		t.Error("optional missing secret set a variable")
	}
	if order[0] != "CM_b" || order[1] != "CM_bad-key" || order[2] != "CM_k" {
		t.Errorf("envFrom not first and sorted: %v", order)
	}

	c.Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "nope"}}}}
	if _, err := makeEnv(pod, c, podIPs{}, src, nil); !errors.Is(err, errNotFound) {
		t.Errorf("missing key: %v, want errNotFound", err)
	}
}

func TestEnvFileValue(t *testing.T) {
	const file = `# written by the init container
  DB_HOST='db.local'  # a comment
EMPTY=''
BLANK= 'ignored'
MULTI='line one
line two'
HASH='a # b'
DOLLAR='$(HOME) $x'
DB_HOST='second'
`
	for key, want := range map[string]string{
		"DB_HOST": "db.local", // the first one wins
		"EMPTY":   "",
		"BLANK":   "",
		"MULTI":   "line one\nline two",
		"HASH":    "a # b",
		"DOLLAR":  "$(HOME) $x",
		"NOPE":    "",
	} {
		got, err := envFileValue(strings.NewReader(file), key)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", key, got, err, want)
		}
	}
	for content, msg := range map[string]string{
		"A=unquoted\n":     "line 1: value must be enclosed in single quotes",
		"A=\n":             "line 1: value must be enclosed in single quotes",
		"\n# x\nA = 'v'\n": "line 3: whitespace before '=' is not allowed",
		"=v\n":             "line 1: empty variable name",
		"just words\n":     "line 1: missing '='",
		"A='v' trailing\n": "line 1: unexpected content after closing quote",
		"A='v\nB='w'\n":    "line 2: unexpected content after closing quote",
		"A='open\nmore\n":  "starting at line 1: unclosed single quote",
	} {
		if _, err := envFileValue(strings.NewReader(content), "Z"); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error with %q", content, err, msg)
		}
	}
	// Checked only up to the key's first assignment, as kubelet.
	if got, err := envFileValue(strings.NewReader("A='1'\nbroken\n"), "A"); err != nil || got != "1" {
		t.Errorf("key before a broken line: %q %v", got, err)
	}
}

func TestMakeEnvFileKeyRef(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf", "app.env"), []byte("TOKEN='abc'\nEMPTY=''\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "x.env"), []byte("TOKEN='stolen'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "x.env"), filepath.Join(dir, "link.env")); err != nil {
		t.Fatal(err)
	}
	vols := map[string]volume{"cfg": {hostPath: dir}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	yes := true
	ref := func(name, vol, path, key string, optional bool) v1.EnvVar {
		sel := &v1.FileKeySelector{VolumeName: vol, Path: path, Key: key}
		if optional {
			sel.Optional = &yes
		}
		return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FileKeyRef: sel}}
	}
	c := &v1.Container{Name: "c", Env: []v1.EnvVar{
		ref("TOKEN", "cfg", "conf/app.env", "TOKEN", false),
		ref("OPT_KEY", "cfg", "conf/app.env", "NOPE", true),
		ref("OPT_EMPTY", "cfg", "conf/app.env", "EMPTY", true),
		{Name: "URL", Value: "https://x/?t=$(TOKEN)"},
	}}
	kv, err := makeEnv(pod, c, podIPs{}, &fakeObjects{}, vols)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range kv {
		got[e.Key] = string(e.Value)
	}
	if len(got) != 2 || got["TOKEN"] != "abc" || got["URL"] != "https://x/?t=abc" {
		t.Errorf("env %v", got)
	}

	for _, tc := range []struct {
		env  v1.EnvVar
		want string
	}{
		{ref("X", "cfg", "conf/app.env", "NOPE", false),
			`env X: environment variable key "NOPE" not found in file "` + filepath.Join(dir, "conf/app.env") + `"`},
		{ref("X", "cfg", "conf/app.env", "EMPTY", false), `env X: environment variable key "EMPTY" not found in file`},
		// A missing file is an error even when optional, as kubelet.
		{ref("X", "cfg", "none.env", "TOKEN", true), "env X: couldn't parse env file"},
		{ref("X", "cfg", "link.env", "TOKEN", false), "env X: couldn't parse env file"},
		{ref("X", "cfg", "../x.env", "TOKEN", false), "env X: couldn't parse env file"},
		{ref("X", "other", "a.env", "TOKEN", false), `env X: cannot find the volume "other" referenced by FileKeyRef`},
	} {
		c := &v1.Container{Name: "c", Env: []v1.EnvVar{tc.env}}
		if _, err := makeEnv(pod, c, podIPs{}, &fakeObjects{}, vols); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.env.ValueFrom.FileKeyRef, err, tc.want)
		}
	}
}

// TestWorkerFileKeyRef checks that a container whose env file is not
// written yet waits with CreateContainerConfigError, and starts once its
// init container (here: the test) has written it.
func TestWorkerFileKeyRef(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	pod.Spec.InitContainers = nil
	pod.Spec.Volumes = []v1.Volume{{Name: "shared", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	a := &pod.Spec.Containers[0]
	a.Env = append(a.Env, v1.EnvVar{Name: "TOKEN", ValueFrom: &v1.EnvVarSource{
		FileKeyRef: &v1.FileKeySelector{VolumeName: "shared", Path: "app.env", Key: "TOKEN"}}})
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	cs := containerStatus(e.last(t).Status, "a")
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonCreateConfigError || cs.State.Waiting.Message != "env TOKEN: couldn't parse env file" {
		t.Fatalf("before the file: %+v", cs.State)
	}
	dir := filepath.Join(podDir(e.p.cfg.StateDir, pod.UID), "volumes", "empty-dir", "shared")
	if err := os.WriteFile(filepath.Join(dir, "app.env"), []byte("TOKEN='t0k3n'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(time.Minute)
	w.pass(context.Background())
	if cs := containerStatus(e.last(t).Status, "a"); cs.State.Running == nil {
		t.Fatalf("after the file: %+v", cs.State)
	}
}
