package vk

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestEnvObjectEvents(t *testing.T) {
	src := &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{"ns/cfg": {}},
		secrets:    map[string]*v1.Secret{"ns/sec": {}},
	}
	pod := &v1.Pod{}
	pod.Namespace = "ns"
	cmRef := func(name string, opt bool) *v1.EnvVarSource {
		return &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: "k", Optional: ptr.To(opt)}}
	}
	secRef := func(name string, opt bool) *v1.EnvVarSource {
		return &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: "k", Optional: ptr.To(opt)}}
	}
	c := &v1.Container{
		EnvFrom: []v1.EnvFromSource{
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
			{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nocm"}, Optional: ptr.To(true)}},
			{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nosec"}, Optional: ptr.To(true)}},
		},
		Env: []v1.EnvVar{
			{Name: "A", ValueFrom: cmRef("cfg", false)},
			{Name: "B", ValueFrom: secRef("nosec2", true)},
			{Name: "C", ValueFrom: cmRef("nocm2", true)},
			{Name: "D", ValueFrom: secRef("nosec3", false)},
			{Name: "E", ValueFrom: cmRef("nocm3", false)}, // after the first mandatory one: not resolved
		},
	}
	want := []objectEvent{
		{"OptionalConfigMapNotFound", `configmap "nocm" not found`},
		{"OptionalSecretNotFound", `secret "nosec" not found`},
		{"OptionalSecretNotFound", `skipping optional envvar "B": secret "nosec2" not found`},
		{"OptionalConfigMapNotFound", `skipping optional envvar "C": configmap "nocm2" not found`},
		{"MandatorySecretNotFound", `secret "nosec3" not found`},
	}
	if got := envObjectEvents(pod, c, src); !slices.Equal(got, want) {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
	mandatoryFrom := &v1.Container{EnvFrom: []v1.EnvFromSource{
		{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nocm"}}},
		{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nosec"}}},
	}}
	if got := envObjectEvents(pod, mandatoryFrom, src); !slices.Equal(got, []objectEvent{{"MandatoryConfigMapNotFound", `configmap "nocm" not found`}}) {
		t.Errorf("mandatory envFrom: %v", got)
	}
	if got := envObjectEvents(pod, &v1.Container{Env: []v1.EnvVar{{Name: "A", ValueFrom: cmRef("cfg", false)}, {Name: "X", Value: "x"}}}, src); len(got) != 0 {
		t.Errorf("nothing missing: %v", got)
	}
}

func TestVolumeObjectEvents(t *testing.T) {
	src := &fakeObjects{configMaps: map[string]*v1.ConfigMap{"ns/cfg": {}}}
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "a", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "b", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nocm"}}}},
		{Name: "c", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "nosec", Optional: ptr.To(true)}}},
		{Name: "d", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "nosec2"}}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "nocm2"}, Optional: ptr.To(true)}},
		}}}},
		{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}}}
	pod.Namespace = "ns"
	want := []objectEvent{
		{"MandatoryConfigMapNotFound", `configmap "nocm" not found`},
		{"OptionalSecretNotFound", `secret "nosec" not found`},
		{"MandatorySecretNotFound", `secret "nosec2" not found`},
		{"OptionalConfigMapNotFound", `configmap "nocm2" not found`},
	}
	if got := volumeObjectEvents(pod, src); !slices.Equal(got, want) {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
}
