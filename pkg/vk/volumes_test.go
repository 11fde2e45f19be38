package vk

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func readVol(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	if err := writeAtomic(dir, map[string]file{"a": {data: []byte("1"), mode: 0o644}, "sub/b": {data: []byte("2"), mode: 0o400}}, nil); err != nil {
		t.Fatal(err)
	}
	if readVol(t, dir, "a") != "1" || readVol(t, dir, "sub/b") != "2" {
		t.Fatal("content")
	}
	if target, _ := os.Readlink(filepath.Join(dir, "a")); target != "..data/a" {
		t.Errorf("a links to %q", target)
	}
	fi, _ := os.Stat(filepath.Join(dir, "sub/b"))
	if fi.Mode().Perm() != 0o400 {
		t.Errorf("mode %v", fi.Mode())
	}
	data1, _ := os.Readlink(filepath.Join(dir, "..data"))
	// Same content: nothing rewritten.
	if err := writeAtomic(dir, map[string]file{"a": {data: []byte("1"), mode: 0o644}, "sub/b": {data: []byte("2"), mode: 0o400}}, nil); err != nil {
		t.Fatal(err)
	}
	if data2, _ := os.Readlink(filepath.Join(dir, "..data")); data2 != data1 {
		t.Error("unchanged content was rewritten")
	}
	// New content: switched at once, the gone key removed, the old data folder too.
	if err := writeAtomic(dir, map[string]file{"a": {data: []byte("3"), mode: 0o644}}, nil); err != nil {
		t.Fatal(err)
	}
	if readVol(t, dir, "a") != "3" {
		t.Error("update not visible")
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Error("removed key still there")
	}
	if _, err := os.Stat(filepath.Join(dir, data1)); !os.IsNotExist(err) {
		t.Error("old data folder still there")
	}
	if err := writeAtomic(dir, map[string]file{"../escape": {data: nil, mode: 0o644}}, nil); err == nil {
		t.Error("path leaving the volume accepted")
	}
}

func TestSetUpVolumes(t *testing.T) {
	src := &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{"ns/cfg": {Data: map[string]string{"k1": "v1", "k2": "v2"}, BinaryData: map[string][]byte{"bin": {0, 1}}}},
		secrets:    map[string]*v1.Secret{"ns/sec": {Data: map[string][]byte{"pw": []byte("s3cret")}}},
	}
	mode, dflt := int32(0o600), int32(0o440)
	yes := true
	hostDir := filepath.Join(t.TempDir(), "made")
	dirOrCreate := v1.HostPathDirectoryOrCreate
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"b": "2", "a": "1"}},
		Spec: v1.PodSpec{Volumes: []v1.Volume{
			{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
				Items: []v1.KeyToPath{{Key: "k2", Path: "dir/two", Mode: &mode}}}}},
			{Name: "cmall", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: &dflt}}},
			{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec"}}},
			{Name: "optional", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "nope", Optional: &yes}}},
			{Name: "empty", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir, Type: &dirOrCreate}}},
			{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		}},
	}
	dir := t.TempDir()
	vols, err := setUpVolumes(dir, pod, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := readVol(t, vols["cm"].hostPath, "dir/two"); got != "v2" {
		t.Errorf("item: %q", got)
	}
	if _, err := os.Stat(filepath.Join(vols["cm"].hostPath, "k1")); !os.IsNotExist(err) {
		t.Error("items volume has unlisted keys")
	}
	fi, _ := os.Stat(filepath.Join(vols["cm"].hostPath, "dir/two"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("item mode %v", fi.Mode())
	}
	fi, _ = os.Stat(filepath.Join(vols["cmall"].hostPath, "bin"))
	if fi.Mode().Perm() != 0o440 || readVol(t, vols["cmall"].hostPath, "k1") != "v1" {
		t.Errorf("defaultMode %v", fi.Mode())
	}
	if readVol(t, vols["sec"].hostPath, "pw") != "s3cret" || !vols["sec"].readOnly {
		t.Error("secret")
	}
	entries, _ := os.ReadDir(vols["optional"].hostPath)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "..") {
			t.Errorf("optional missing secret has %s", e.Name())
		}
	}
	if fi, err := os.Stat(vols["empty"].hostPath); err != nil || fi.Mode().Perm() != 0o777 || vols["empty"].readOnly {
		t.Errorf("emptyDir %v %v", fi, err)
	}
	if fi, err := os.Stat(hostDir); err != nil || !fi.IsDir() || vols["host"].hostPath != hostDir {
		t.Errorf("hostPath DirectoryOrCreate: %v", err)
	}
	if got := readVol(t, vols["info"].hostPath, "labels"); got != "a=\"1\"\nb=\"2\"" {
		t.Errorf("downwardAPI labels %q", got)
	}

	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "missing", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}})
	if _, err := setUpVolumes(dir, pod, src, nil); err == nil || !strings.Contains(err.Error(), `volume "missing"`) {
		t.Errorf("missing configMap: %v", err)
	}
}

// TestSetUpVolumesUnsupported: a claim or CSI volume is refused with its
// kind named, not mounted as nothing.
func TestSetUpVolumesUnsupported(t *testing.T) {
	for _, c := range []struct {
		src  v1.VolumeSource
		kind string
	}{
		{v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}, "persistentVolumeClaim"},
		{v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "x"}}, "csi"},
		{v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}, "ephemeral"},
	} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
			Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "v", VolumeSource: c.src}}}}
		_, err := setUpVolumes(t.TempDir(), pod, &fakeObjects{}, nil)
		if err == nil || !strings.Contains(err.Error(), `volume "v": `+c.kind+" volumes are not supported") {
			t.Errorf("%s: %v", c.kind, err)
		}
	}
}

// TestEmptyDirFSGroup: with the pod's fsGroup, an emptyDir's folder is
// the group's, group-writable and setgid (kubelet's SetVolumeOwnership);
// without, it stays root's 0777.
func TestEmptyDirFSGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a folder's group to any gid needs root")
	}
	fsGroup := int64(123)
	for _, tc := range []struct {
		name    string
		fsGroup *int64
		mode    os.FileMode
		gid     uint32
	}{
		{"fsGroup", &fsGroup, os.ModeSetgid | 0o777, 123},
		{"no fsGroup", nil, 0o777, 0},
	} {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
			Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{FSGroup: tc.fsGroup},
				Volumes: []v1.Volume{{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
		vols, err := setUpVolumes(t.TempDir(), pod, &fakeObjects{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(vols["e"].hostPath)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode() &^ os.ModeDir; got != tc.mode || fi.Sys().(*syscall.Stat_t).Gid != tc.gid {
			t.Errorf("%s: mode %v gid %d, want %v and %d", tc.name, got, fi.Sys().(*syscall.Stat_t).Gid, tc.mode, tc.gid)
		}
	}
}
