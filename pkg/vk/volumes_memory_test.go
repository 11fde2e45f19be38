package vk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func i64(v int64) *int64 { return &v }

// canMount skips t where tmpfs cannot be mounted (no CAP_SYS_ADMIN).
func canMount(t *testing.T) {
	t.Helper()
	p := t.TempDir()
	if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); errors.Is(err, unix.EPERM) {
		t.Skip("no right to mount tmpfs here")
	} else if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(p, 0); err != nil {
		t.Fatal(err)
	}
}

// mountAt is the mount at exactly p, or nil.
func mountAt(t *testing.T, p string) *mountinfo.Info {
	t.Helper()
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) > 1 {
		t.Fatalf("%d mounts stacked on %s", len(ms), p)
	}
	if len(ms) == 0 {
		return nil
	}
	return ms[0]
}

func perm(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky)
}

func owner(t *testing.T, p string) (uid, gid int64) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int64(st.Uid), int64(st.Gid)
}

func secretPod(sc *v1.PodSecurityContext) *v1.Pod {
	dflt, itemMode := int32(0o400), int32(0o600)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec: v1.PodSpec{
			SecurityContext:    sc,
			ServiceAccountName: "robot",
			Containers:         []v1.Container{{Name: "c"}},
			Volumes: []v1.Volume{
				{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec", DefaultMode: &dflt,
					Items: []v1.KeyToPath{{Key: "pw", Path: "pw"}, {Key: "key", Path: "dir/key", Mode: &itemMode}}}}},
				{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{DefaultMode: func() *int32 { m := int32(0o644); return &m }(),
					Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}}}}},
				{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
			},
		},
	}
}

func secretObjects() *richObjects {
	return &richObjects{fakeObjects: &fakeObjects{
		configMaps: map[string]*v1.ConfigMap{"ns/cfg": {Data: map[string]string{"a": "1"}}},
		secrets:    map[string]*v1.Secret{"ns/sec": {Data: map[string][]byte{"pw": []byte("s3cret"), "key": []byte("k")}}},
	}}
}

// TestVolumeOwnership checks kubelet's modes and owners (its
// SetVolumeOwnership and projected token rules) for a secret with a
// defaultMode and an item mode, a projected token and a configMap, with
// and without fsGroup and a common runAsUser.
func TestVolumeOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	type want struct {
		mode     os.FileMode
		uid, gid int64
	}
	for _, c := range []struct {
		name  string
		sc    *v1.PodSecurityContext
		files map[string]want // volume/path
		dirs  map[string]want
	}{
		{"no fsGroup, no user", nil, map[string]want{
			"sec/pw": {0o400, 0, 0}, "sec/dir/key": {0o600, 0, 0}, "tok/token": {0o644, 0, 0}, "cm/a": {0o644, 0, 0},
		}, map[string]want{"sec/..data/": {0o755, 0, 0}, "sec/..data/dir": {0o755, 0, 0}}},
		{"runAsUser: the token is the user's, 0600", &v1.PodSecurityContext{RunAsUser: i64(1000)}, map[string]want{
			"sec/pw": {0o400, 0, 0}, "sec/dir/key": {0o600, 0, 0}, "tok/token": {0o600, 1000, 0},
		}, nil},
		{"fsGroup: group read, group owned", &v1.PodSecurityContext{RunAsUser: i64(1000), FSGroup: i64(2000)}, map[string]want{
			"sec/pw": {0o440, 0, 2000}, "sec/dir/key": {0o640, 0, 2000}, "tok/token": {0o640, 1000, 2000}, "cm/a": {0o644, 0, 2000},
		}, map[string]want{
			"sec/..data/": {os.ModeSetgid | 0o755, 0, 2000}, "sec/..data/dir": {os.ModeSetgid | 0o755, 0, 2000},
			"sec/": {os.ModeSetgid | 0o755, 0, 2000},
		}},
		{"fsGroup without a user: token 0640 root's", &v1.PodSecurityContext{FSGroup: i64(2000)}, map[string]want{
			"tok/token": {0o640, 0, 2000},
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			vols, err := setUpVolumes(dir, secretPod(c.sc), secretObjects(), nil)
			if err != nil {
				t.Fatal(err)
			}
			at := func(vp string) string {
				v, rel, _ := strings.Cut(vp, "/")
				return filepath.Join(vols[v].hostPath, rel)
			}
			for vp, w := range c.files {
				fi, err := os.Stat(at(vp))
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if fi.Mode().Perm() != w.mode || int64(st.Uid) != w.uid || int64(st.Gid) != w.gid {
					t.Errorf("%s: %v %d:%d, want %v %d:%d", vp, fi.Mode().Perm(), st.Uid, st.Gid, w.mode, w.uid, w.gid)
				}
			}
			for vp, w := range c.dirs {
				p := at(vp)
				if got := perm(t, p); got != w.mode {
					t.Errorf("folder %s: %v, want %v", vp, got, w.mode)
				}
				if uid, gid := owner(t, p); uid != w.uid || gid != w.gid {
					t.Errorf("folder %s: %d:%d, want %d:%d", vp, uid, gid, w.uid, w.gid)
				}
			}
			// A second pass changes nothing: the owners and modes are
			// the ones asked for.
			data, _ := os.Readlink(filepath.Join(vols["sec"].hostPath, dataDirName))
			if _, err := setUpVolumes(dir, secretPod(c.sc), secretObjects(), nil); err != nil {
				t.Fatal(err)
			}
			if again, _ := os.Readlink(filepath.Join(vols["sec"].hostPath, dataDirName)); again != data {
				t.Errorf("unchanged volume rewritten: %s then %s", data, again)
			}
		})
	}
}

func TestPodFSUser(t *testing.T) {
	sc := func(u int64) *v1.SecurityContext { return &v1.SecurityContext{RunAsUser: &u} }
	for _, c := range []struct {
		name string
		spec v1.PodSpec
		want *int64
	}{
		{"none", v1.PodSpec{Containers: []v1.Container{{}}}, nil},
		{"the pod's", v1.PodSpec{SecurityContext: &v1.PodSecurityContext{RunAsUser: i64(5)}, Containers: []v1.Container{{}, {}}}, i64(5)},
		{"the containers' own, equal", v1.PodSpec{SecurityContext: &v1.PodSecurityContext{RunAsUser: i64(5)},
			InitContainers: []v1.Container{{SecurityContext: sc(7)}}, Containers: []v1.Container{{SecurityContext: sc(7)}}}, i64(7)},
		{"two users", v1.PodSpec{SecurityContext: &v1.PodSecurityContext{RunAsUser: i64(5)}, Containers: []v1.Container{{}, {SecurityContext: sc(7)}}}, nil},
		{"one without", v1.PodSpec{Containers: []v1.Container{{SecurityContext: sc(7)}, {}}}, nil},
		{"an ephemeral container of another user", v1.PodSpec{Containers: []v1.Container{{SecurityContext: sc(7)}},
			EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{SecurityContext: sc(8)}}}}, nil},
	} {
		got := podFSUser(&v1.Pod{Spec: c.spec})
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSecretVolumesOnTmpfs mounts real tmpfs: secret, projected and
// downwardAPI volumes each get one (noswap where the kernel has it), the
// configMap stays on disk, the pod's folders are closed to others, a
// second pass and a restarted vk-cri (a new medium) reuse the mounts, and
// removing the pod unmounts them.
func TestSecretVolumesOnTmpfs(t *testing.T) {
	canMount(t)
	pod := secretPod(&v1.PodSecurityContext{FSGroup: i64(2000)})
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
		Items: []v1.DownwardAPIVolumeFile{{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}})
	dir := filepath.Join(t.TempDir(), "pods", "u")
	t.Cleanup(func() { _ = unmountAll(dir) })
	mem := &memoryMedium{}
	vols, err := setUpVolumes(dir, pod, secretObjects(), mem)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sec", "tok", "info"} {
		p := vols[name].hostPath
		m := mountAt(t, p)
		if m == nil || m.FSType != "tmpfs" {
			t.Fatalf("%s (%s) is not a tmpfs: %+v", name, p, m)
		}
		if !mem.noNoswap.Load() && !strings.Contains(m.VFSOptions, "noswap") {
			t.Errorf("%s: no noswap in %q", name, m.VFSOptions)
		}
		if !strings.Contains(m.Options, "nosuid") || !strings.Contains(m.Options, "nodev") {
			t.Errorf("%s: options %q", name, m.Options)
		}
		// tmpfs's 1777, with the fsGroup's setgid.
		if got := perm(t, p); got != os.ModeSticky|os.ModeSetgid|0o777 {
			t.Errorf("%s: root %v", name, got)
		}
	}
	if m := mountAt(t, vols["cm"].hostPath); m != nil {
		t.Errorf("the configMap is mounted (kubelet keeps it on disk): %+v", m)
	}
	for _, p := range []string{dir, filepath.Join(dir, "volumes"), filepath.Join(dir, "volumes", "secret"), filepath.Join(dir, "volumes", "configmap")} {
		if got := perm(t, p); got != 0o750 {
			t.Errorf("%s: %v, want 0750", p, got)
		}
	}
	if got := readVol(t, vols["sec"].hostPath, "dir/key"); got != "k" {
		t.Errorf("secret item: %q", got)
	}

	// Again, and as a restarted vk-cri: the same mounts, one each.
	for _, m := range []*memoryMedium{mem, {}} {
		if _, err := setUpVolumes(dir, pod, secretObjects(), m); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"sec", "tok", "info"} {
			if mountAt(t, vols[name].hostPath) == nil {
				t.Errorf("%s not mounted after a second pass", name)
			}
		}
	}
	if got := readVol(t, vols["tok"].hostPath, "token"); got != "jwt-for-robot-" {
		t.Errorf("token after the passes: %q", got)
	}

	if err := removePodDir(dir); err != nil {
		t.Fatal(err)
	}
	if ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir)); len(ms) != 0 {
		t.Errorf("left mounted: %+v", ms[0])
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("pod folder left: %v", err)
	}
}

// TestSecretVolumesOnDisk: without the right to mount, or for a volume an
// earlier vk-cri wrote on disk, the files stay on disk in a folder only
// root can open.
func TestSecretVolumesOnDisk(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		mem := &memoryMedium{}
		mem.refused.Store(true)
		dir := t.TempDir()
		vols, err := setUpVolumes(dir, secretPod(nil), secretObjects(), mem)
		if err != nil {
			t.Fatal(err)
		}
		if mountAt(t, vols["sec"].hostPath) != nil {
			t.Error("mounted though refused")
		}
		if got := perm(t, filepath.Dir(vols["sec"].hostPath)); got != 0o700 {
			t.Errorf("secret folder %v, want 0700", got)
		}
		if got := readVol(t, vols["sec"].hostPath, "pw"); got != "s3cret" {
			t.Errorf("secret %q", got)
		}
	})
	t.Run("made on disk before", func(t *testing.T) {
		canMount(t)
		dir := t.TempDir()
		t.Cleanup(func() { _ = unmountAll(dir) })
		// What an earlier vk-cri left: files in an open folder.
		old := filepath.Join(dir, "volumes", "secret", "sec")
		if err := writeAtomic(old, map[string]file{"pw": {data: []byte("old"), mode: 0o644}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		vols, err := setUpVolumes(dir, secretPod(nil), secretObjects(), &memoryMedium{})
		if err != nil {
			t.Fatal(err)
		}
		if mountAt(t, old) != nil {
			t.Error("a tmpfs was mounted over a folder running containers may have bound")
		}
		if got := readVol(t, old, "pw"); got != "s3cret" {
			t.Errorf("not updated in place: %q", got)
		}
		if got := perm(t, dir); got != 0o750 {
			t.Errorf("pod folder still %v", got)
		}
		if got := perm(t, filepath.Dir(old)); got != 0o700 {
			t.Errorf("secret folder %v, want 0700", got)
		}
		if mountAt(t, vols["tok"].hostPath) == nil {
			t.Error("a new volume of the same pod is not on tmpfs")
		}
	})
}

func TestPrepareStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	for _, p := range []string{dir, filepath.Join(dir, "pods")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o755); err != nil { // as an earlier vk-cri made them
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := PrepareStateDir(dir); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o750, filepath.Join(dir, "pods"): 0o750, filepath.Join(dir, "logs"): 0o700} {
		if got := perm(t, p); got != want {
			t.Errorf("%s: %v, want %v", p, got, want)
		}
	}
}

// TestCleanOrphanedPodDirs: the folder of a pod with neither a worker nor
// a sandbox goes, its tmpfs unmounted; the others stay.
func TestCleanOrphanedPodDirs(t *testing.T) {
	e := newTestEnv(t)
	p := e.p
	pods := filepath.Join(p.cfg.StateDir, "pods")
	mk := func(uid string) string {
		d := filepath.Join(pods, uid, "volumes", "secret", "s")
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
		return d
	}
	gone, withSandbox, withWorker, leftover := mk("gone"), mk("sandboxed"), mk("worked"), mk(removingPrefix+"old")
	mounted := false
	if err := unix.Mount("tmpfs", gone, "tmpfs", 0, "size=1m"); err == nil {
		mounted = true
		t.Cleanup(func() { _ = unix.Unmount(gone, unix.MNT_DETACH) })
	}
	if _, err := e.rt.RunPodSandbox(context.Background(), &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "s", Namespace: "ns", Uid: "sandboxed"}}, ""); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.workers[types.UID("worked")] = newPodWorker(p, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ns", UID: "worked"}})
	p.mu.Unlock()

	p.cleanOrphanedPodDirs(context.Background())
	for _, d := range []string{gone, leftover} {
		if _, err := os.Stat(filepath.Dir(filepath.Dir(filepath.Dir(d)))); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", d, err)
		}
	}
	for _, d := range []string{withSandbox, withWorker} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
	if mounted {
		if ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(pods)); len(ms) != 0 {
			t.Errorf("left mounted: %s", ms[0].Mountpoint)
		}
	}
}

// TestStagesMounts reads cri-compose's verbose Status info: a runtime that
// copies volumes to a remote engine says so ("stageMounts").
func TestStagesMounts(t *testing.T) {
	for info, want := range map[string]bool{
		`{"stageMounts":true,"ncpu":2}`: true,
		`{"stageMounts":false}`:         false,
		`{"ncpu":2}`:                    false,
		`not json`:                      false,
	} {
		if got := readHostInfo(t.TempDir(), map[string]string{"config": info}).stagesMounts; got != want {
			t.Errorf("%s: %v, want %v", info, got, want)
		}
	}
}
