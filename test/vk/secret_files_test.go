package vk_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSecretFilesPrivate runs a pod as a non-root user with an fsGroup, a
// secret volume (defaultMode 0400, one item 0600) and a projected
// serviceAccountToken, and checks what kubelet guarantees: each volume is
// a tmpfs on the host, the files have kubelet's modes and owners for that
// fsGroup, the pod reads them as its own user, and no other user of the
// host can read or list anything under vk-cri's state dir, even with the
// folders above each level opened. A restart of vk-cri keeps the same
// tmpfs under the running pod (an update still reaches it); deleting the
// pod unmounts them and removes its folder.
func TestSecretFilesPrivate(t *testing.T) {
	need(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (util-linux) is needed to act as another user: %v", err)
	}
	ns := namespace(t)
	ctx := context.Background()
	core := client.CoreV1()
	sa, err := core.ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{})
	mustCreate(t, "service account", sa, err)
	sec, err := core.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data: map[string][]byte{"pw": []byte("s3cret"), "key": []byte("private-key")}}, metav1.CreateOptions{})
	mustCreate(t, "secret", sec, err)

	const uid, fsGroup = int64(1000), int64(2000)
	dflt, itemMode := int32(0o400), int32(0o600)
	exp := int64(600)
	main := busybox("main", `trap 'exit 0' TERM; while true; do sleep 1; done`)
	main.VolumeMounts = []v1.VolumeMount{{Name: "sec", MountPath: "/etc/sec"}, {Name: "tok", MountPath: "/var/run/tok"}}
	grace := int64(2)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "private", Namespace: ns},
		Spec: v1.PodSpec{
			ServiceAccountName:            "robot",
			TerminationGracePeriodSeconds: &grace,
			SecurityContext:               &v1.PodSecurityContext{RunAsUser: new(uid), RunAsGroup: new(uid), FSGroup: new(fsGroup)},
			Containers:                    []v1.Container{main},
			Volumes: []v1.Volume{
				{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec", DefaultMode: &dflt,
					Items: []v1.KeyToPath{{Key: "pw", Path: "pw"}, {Key: "key", Path: "dir/key", Mode: &itemMode}}}}},
				{Name: "tok", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
					{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: &exp, Path: "token"}}}}}},
			},
		},
	})
	p := waitRunning(t, ns, pod.Name)

	state := filepath.Join(runDir, "vk-state")
	podDir := filepath.Join(state, "pods", string(p.UID))
	vols := map[string]string{
		"sec": filepath.Join(podDir, "volumes", "secret", "sec"),
		"tok": filepath.Join(podDir, "volumes", "projected", "tok"),
	}
	// Each volume is a tmpfs of its own on the host.
	mounts := hostMounts(t, podDir)
	for name, dir := range vols {
		if m, ok := mounts[dir]; !ok || m.fsType != "tmpfs" {
			t.Errorf("volume %s (%s) is not a tmpfs on the host: %+v (mounts below the pod: %v)", name, dir, m, mounts)
		}
	}

	// kubelet's modes and owners with fsGroup: files | 0440 and the
	// group's; the token 0600 → 0640, owned by the pod's user.
	type want struct {
		mode     fs.FileMode
		uid, gid int64
	}
	files := map[string]want{
		"sec/pw":      {0o440, 0, fsGroup},
		"sec/dir/key": {0o640, 0, fsGroup},
		"tok/token":   {0o640, uid, fsGroup},
	}
	for vp, w := range files {
		v, rel, _ := strings.Cut(vp, "/")
		fi, err := os.Stat(filepath.Join(vols[v], rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != w.mode || int64(st.Uid) != w.uid || int64(st.Gid) != w.gid {
			t.Errorf("host %s: %v %d:%d, want %v %d:%d", vp, fi.Mode().Perm(), st.Uid, st.Gid, w.mode, w.uid, w.gid)
		}
	}
	// The pod sees the same, and reads them as its own user.
	if id := strings.TrimSpace(execIn(t, p, "main", "id", "-u")); id != fmt.Sprint(uid) {
		t.Fatalf("the container runs as %s, want %d", id, uid)
	}
	for path, w := range map[string]want{"/etc/sec/pw": files["sec/pw"], "/etc/sec/dir/key": files["sec/dir/key"], "/var/run/tok/token": files["tok/token"]} {
		if got, wantStat := strings.TrimSpace(execIn(t, p, "main", "stat", "-L", "-c", "%a %u %g", path)), fmt.Sprintf("%o %d %d", w.mode, w.uid, w.gid); got != wantStat {
			t.Errorf("in the pod, %s: %s, want %s", path, got, wantStat)
		}
		if _, err := tryExec(p, "main", "cat", path); err != nil {
			t.Errorf("the pod's user cannot read %s: %v", path, err)
		}
	}
	if got := execIn(t, p, "main", "cat", "/etc/sec/dir/key"); got != "private-key" {
		t.Errorf("/etc/sec/dir/key = %q", got)
	}

	// Another user of the host: nothing under the state dir can be read
	// or listed. The test's own run folder (0700) is opened for that, so
	// that only vk-cri's modes stand in the way; then the state dir and
	// its pods folder are opened too, one after the other, so that each
	// level is shown closed on its own, as kubelet's root, pods and pod
	// folders are.
	if first := firstReadableBy(t, setpriv, openTree(t)); !strings.HasSuffix(first, "/sub/f") {
		t.Fatalf("the check as user 65534 found %q in a tree whose only open file is sub/f", first)
	}
	opened := []string{runDir, state, filepath.Join(state, "pods")}
	orig := make([]fs.FileMode, len(opened))
	restore := func() {
		for i := len(opened) - 1; i >= 0; i-- {
			if orig[i] != 0 {
				_ = os.Chmod(opened[i], orig[i])
			}
		}
	}
	defer restore()
	for i, dir := range opened {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		orig[i] = fi.Mode().Perm()
		open := fs.FileMode(0o755)
		if i == 0 {
			open = 0o711 // the run folder: passed through, not listed
		}
		if err := os.Chmod(dir, orig[i]|open); err != nil {
			t.Fatal(err)
		}
		// The folders opened here are listable, by the test's doing.
		if first := firstReadableBy(t, setpriv, state, opened[:i+1]...); first != "" {
			t.Fatalf("with %v opened, user 65534 can read %s", opened[:i+1], first)
		}
	}
	restore()
	t.Logf("user 65534 can read nothing under the state dir, even with %v opened", opened)

	// vk-cri restarted: the same tmpfs (same mount ids), the pod not
	// restarted, and an update still reaches it.
	sbs := sandboxes(t, string(p.UID))
	if err := restartVK(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vk-cri back", 60*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(vkLog)
		return bytes.Contains(b, []byte(`"Pod added" pod="`+ns+`/private"`)), tail(vkLog, 5)
	})
	sec.Data["pw"] = []byte("rotated")
	if _, err := core.Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the secret update in the container after the restart", 30*time.Second, func() (bool, string) {
		got, err := tryExec(p, "main", "cat", "/etc/sec/pw")
		return got == "rotated", fmt.Sprintf("%q (%v)", got, err)
	})
	after := hostMounts(t, podDir)
	for name, dir := range vols {
		if after[dir].id != mounts[dir].id {
			t.Errorf("volume %s: mount %s before the restart, %s after (want the same tmpfs)", name, mounts[dir].id, after[dir].id)
		}
	}
	if len(after) != len(mounts) {
		t.Errorf("mounts below the pod before the restart %v, after %v", mounts, after)
	}
	if sbs2 := sandboxes(t, string(p.UID)); len(sbs2) != 1 || sbs2[0].Id != sbs[0].Id {
		t.Errorf("sandboxes before %v, after %v", sbs, sbs2)
	}
	if cs := containerStatus(getPod(t, ns, p.Name), "main"); cs == nil || cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("the container after vk-cri's restart: %+v", cs)
	}

	// Deleted: no tmpfs left, no folder.
	deletePod(t, ns, p.Name, 60*time.Second)
	waitFor(t, "the pod's tmpfs unmounted and its folder gone", 10*time.Second, func() (bool, string) {
		left := hostMounts(t, podDir)
		_, err := os.Stat(podDir)
		return len(left) == 0 && os.IsNotExist(err), fmt.Sprintf("mounts %v, folder: %v", left, err)
	})
}

type hostMount struct{ id, fsType string }

// hostMounts reads /proc/self/mountinfo (this test shares the host's
// mount namespace with vk-cri): the mounts at or below dir.
func hostMounts(t *testing.T, dir string) map[string]hostMount {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]hostMount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		mp := fields[4]
		if mp != dir && !strings.HasPrefix(mp, dir+"/") {
			continue
		}
		for i := 6; i < len(fields)-1; i++ {
			if fields[i] == "-" {
				out[mp] = hostMount{id: fields[0], fsType: fields[i+1]}
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// firstReadableBy walks root as this (root) user and has user and group
// 65534, with no other groups, try to read every file and list every
// folder but those skipped; it returns the first path that worked, or "".
func firstReadableBy(t *testing.T, setpriv, root string, skip ...string) string {
	t.Helper()
	var paths bytes.Buffer
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 && !slices.Contains(skip, p) { // a link is tried through its target
			fmt.Fprintln(&paths, p)
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A folder is listed (ls), anything else read (head -c1); any that
	// works is printed. Paths have no newlines (vk-cri's names).
	script := `while IFS= read -r p; do
	if [ -d "$p" ]; then ls -a "$p" >/dev/null 2>&1 && { echo "$p"; exit 0; }
	elif [ -e "$p" ]; then head -c1 "$p" >/dev/null 2>&1 && { echo "$p"; exit 0; }
	fi
done; exit 0`
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", script)
	cmd.Stdin = &paths
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as user 65534: %v: %s", err, out)
	}
	if n == 0 {
		t.Fatalf("nothing under %s to try", root)
	}
	return strings.TrimSpace(string(out))
}

// openTree is a folder with a file that any user can read, to show that
// firstReadableBy finds such a file.
func openTree(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vke2e-open-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Only the file is open (and the folders on the way passable): the
	// check must get to it.
	for _, p := range []string{dir, sub} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
