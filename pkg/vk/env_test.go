package vk

import (
	"errors"
	"testing"

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
	kv, err := makeEnv(pod, c, podIPs{podIPs: []string{"10.0.0.9"}, hostIPs: []string{"192.0.2.1"}}, src)
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
	if _, err := makeEnv(pod, c, podIPs{}, src); !errors.Is(err, errNotFound) {
		t.Errorf("missing key: %v, want errNotFound", err)
	}
}
