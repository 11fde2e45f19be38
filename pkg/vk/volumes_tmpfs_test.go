package vk

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMemoryDirSize(t *testing.T) {
	alloc := v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Gi")}
	lim := func(s string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse(s)}}
	}
	q := func(s string) *resource.Quantity { r := resource.MustParse(s); return &r }
	for _, c := range []struct {
		name  string
		spec  v1.PodSpec
		limit *resource.Quantity
		want  int64
	}{
		{"no limits: the node's", v1.PodSpec{Containers: []v1.Container{{}}}, nil, 8 << 30},
		{"one container without", v1.PodSpec{Containers: []v1.Container{{Resources: lim("1Gi")}, {}}}, nil, 8 << 30},
		{"the pod's limit", v1.PodSpec{Containers: []v1.Container{{Resources: lim("1Gi")}, {Resources: lim("1Gi")}}}, nil, 2 << 30},
		{"a larger init container", v1.PodSpec{InitContainers: []v1.Container{{Resources: lim("3Gi")}}, Containers: []v1.Container{{Resources: lim("1Gi")}}}, nil, 3 << 30},
		{"sizeLimit below", v1.PodSpec{Containers: []v1.Container{{Resources: lim("1Gi")}}}, q("64Mi"), 64 << 20},
		{"sizeLimit above", v1.PodSpec{Containers: []v1.Container{{Resources: lim("1Gi")}}}, q("2Gi"), 1 << 30},
	} {
		if got := memoryDirSize(&v1.Pod{Spec: c.spec}, c.limit, alloc); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestMemoryEmptyDir mounts a real tmpfs (it needs CAP_SYS_ADMIN, as
// vk-cri does for such volumes).
func TestMemoryEmptyDir(t *testing.T) {
	dir := t.TempDir()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c"}},
			Volumes: []v1.Volume{{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{
				Medium: v1.StorageMediumMemory, SizeLimit: func() *resource.Quantity { q := resource.MustParse("16Mi"); return &q }()}}}},
		},
	}
	p := filepath.Join(dir, "volumes", "empty-dir", "mem")
	if err := os.MkdirAll(p, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); errors.Is(err, unix.EPERM) {
		t.Skip("no right to mount tmpfs here")
	} else if err != nil {
		t.Fatal(err)
	} else if err := unix.Unmount(p, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(p, unix.MNT_DETACH) })
	vols, err := setUpVolumes(dir, pod, &fakeObjects{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if vols["mem"].hostPath != p {
		t.Fatalf("hostPath %s", vols["mem"].hostPath)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil || st.Type != unix.TMPFS_MAGIC || st.Blocks*uint64(st.Bsize) != 16<<20 {
		t.Fatalf("not a 16Mi tmpfs: type %x, %d bytes (%v)", st.Type, st.Blocks*uint64(st.Bsize), err)
	}
	if err := os.WriteFile(filepath.Join(p, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A second pass keeps the mount and its content.
	if _, err := setUpVolumes(dir, pod, &fakeObjects{}, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(p, "f")); err != nil || string(b) != "x" {
		t.Errorf("second pass lost the content: %q %v", b, err)
	}
	if err := removePodDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("pod folder left: %v", err)
	}
}
