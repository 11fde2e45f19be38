package vk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// richObjects adds services, tokens and the node's allocatable to
// fakeObjects.
type richObjects struct {
	*fakeObjects
	svcs  map[string][]*v1.Service
	alloc v1.ResourceList
	// tokens issued, by audience
	asked []string
}

func (r *richObjects) services(ns string) ([]*v1.Service, error) { return r.svcs[ns], nil }
func (r *richObjects) allocatable() v1.ResourceList              { return r.alloc }
func (r *richObjects) serviceAccountToken(pod *v1.Pod, s *v1.ServiceAccountTokenProjection) ([]byte, error) {
	r.asked = append(r.asked, s.Audience)
	return []byte("jwt-for-" + serviceAccountName(pod) + "-" + s.Audience), nil
}

func TestProjectedVolume(t *testing.T) {
	src := &richObjects{fakeObjects: &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{
			"ns/cfg":              {Data: map[string]string{"a": "1", "b": "2"}},
			"ns/kube-root-ca.crt": {Data: map[string]string{"ca.crt": "PEM"}},
		},
		secrets: map[string]*v1.Secret{"ns/sec": {Data: map[string][]byte{"pw": []byte("s3cret")}}},
	}, alloc: v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Gi")}}
	yes := true
	dflt, itemMode := int32(0o440), int32(0o600)
	exp := int64(3607)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"app": "x"}},
		Spec: v1.PodSpec{
			ServiceAccountName: "robot",
			Containers:         []v1.Container{{Name: "c"}},
			Volumes: []v1.Volume{{Name: "all", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				DefaultMode: &dflt,
				Sources: []v1.VolumeProjection{
					{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
						Items: []v1.KeyToPath{{Key: "a", Path: "cfg/a"}, {Key: "b", Path: "cfg/b", Mode: &itemMode}}}},
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}}},
					{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: &yes}},
					{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
						{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
						{Path: "mem", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
					}}},
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Audience: "vault", Path: "tok/vault"}},
				},
			}}}, {
				// What the ServiceAccount admission plugin adds.
				Name: "kube-api-access-abcde", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
					Sources: []v1.VolumeProjection{
						{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: &exp, Path: "token"}},
						{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "kube-root-ca.crt"},
							Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
						{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{
							{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
					},
				}},
			}},
		},
	}
	vols, err := setUpVolumes(t.TempDir(), pod, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := vols["all"]
	if !all.readOnly || filepath.Base(filepath.Dir(all.hostPath)) != "projected" {
		t.Errorf("volume %+v", all)
	}
	for p, want := range map[string]string{
		"cfg/a": "1", "cfg/b": "2", "pw": "s3cret", "labels": `app="x"`, "mem": "8192", "tok/vault": "jwt-for-robot-vault",
	} {
		if got := readVol(t, all.hostPath, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	for p, want := range map[string]os.FileMode{"cfg/a": 0o440, "cfg/b": 0o600, "pw": 0o440, "tok/vault": 0o440} {
		if fi, err := os.Stat(filepath.Join(all.hostPath, p)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s mode %v (%v), want %v", p, fi.Mode(), err, want)
		}
	}
	api := vols["kube-api-access-abcde"].hostPath
	for p, want := range map[string]string{"token": "jwt-for-robot-", "ca.crt": "PEM", "namespace": "ns"} {
		if got := readVol(t, api, p); got != want {
			t.Errorf("kube-api-access %s = %q, want %q", p, got, want)
		}
	}
	if fi, _ := os.Stat(filepath.Join(api, "token")); fi.Mode().Perm() != 0o644 {
		t.Errorf("token mode %v", fi.Mode())
	}

	// A missing key of a non-optional source fails the volume; two
	// sources giving one path too.
	bad := pod.DeepCopy()
	bad.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Items[0].Key = "nope"
	if _, err := setUpVolumes(t.TempDir(), bad, src, nil); err == nil || !strings.Contains(err.Error(), `key "nope"`) {
		t.Errorf("missing key: %v", err)
	}
	bad = pod.DeepCopy()
	bad.Spec.Volumes[1].Projected.Sources[1].ConfigMap.Items[0].Path = "token"
	if _, err := setUpVolumes(t.TempDir(), bad, src, nil); err == nil || !strings.Contains(err.Error(), "two sources") {
		t.Errorf("duplicate path: %v", err)
	}
	// Without a token source (no API client) the token cannot be made.
	if _, err := setUpVolumes(t.TempDir(), pod, src.fakeObjects, nil); err == nil {
		t.Error("token without a token source")
	}
}

func TestMountsObject(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "a", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm1"}}}},
		{Name: "b", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s1"}}},
		{Name: "c", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cm2"}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s2"}}},
		}}}},
	}}}
	for _, c := range []struct {
		kind objectKind
		name string
		want bool
	}{
		{kindConfigMap, "cm1", true}, {kindConfigMap, "cm2", true}, {kindSecret, "s1", true}, {kindSecret, "s2", true},
		{kindSecret, "cm1", false}, {kindConfigMap, "s2", false}, {kindConfigMap, "other", false},
	} {
		if got := mountsObject(pod, c.kind, c.name); got != c.want {
			t.Errorf("mountsObject(%v, %s) = %v", c.kind, c.name, got)
		}
	}
}
