package perm

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// stat is a path's permission bits and group.
func stat(t *testing.T, p string) (fs.FileMode, int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm(), int(fi.Sys().(*syscall.Stat_t).Gid)
}

func TestOwner(t *testing.T) {
	a := Owner()
	root := t.TempDir()
	// An existing folder is left alone by MkdirAll: kubelet's pod log
	// directory is kubelet's.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "a", "b", "c")
	if err := a.MkdirAll(deep); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b"), deep} {
		if m, _ := stat(t, p); m != 0o700 {
			t.Errorf("%s: mode %o, want 0700", p, m)
		}
	}
	if m, _ := stat(t, root); m != 0o755 {
		t.Errorf("existing folder changed to %o", m)
	}
	if err := a.MkdirAll(deep); err != nil {
		t.Errorf("MkdirAll of an existing folder: %v", err)
	}
	f := filepath.Join(deep, "compose.yaml")
	if err := os.WriteFile(f, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.MkdirAll(f); err == nil {
		t.Error("MkdirAll over a file succeeded")
	}
	// WriteFile replaces a 0644 file with a 0600 one, whole.
	if err := a.WriteFile(f, []byte("new: secret"), a.File()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(f); string(b) != "new: secret" {
		t.Errorf("content %q", b)
	}
	if m, _ := stat(t, f); m != 0o600 {
		t.Errorf("written file mode %o, want 0600", m)
	}
	if _, err := os.Stat(f + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	// Set tightens what an older version left open, and leaves links.
	if err := os.Chmod(f, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(deep, "link")
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(link, 0o777); err != nil {
		t.Fatal(err)
	}
	if m, _ := stat(t, f); m != 0o644 {
		t.Errorf("Set on a link changed its target to %o", m)
	}
	if err := a.Set(f, a.File()); err != nil {
		t.Fatal(err)
	}
	if m, _ := stat(t, f); m != 0o600 {
		t.Errorf("after Set: %o, want 0600", m)
	}
}

func TestGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("giving a file to another group needs root")
	}
	const gid = 65534
	a := Group(gid)
	root := t.TempDir()
	dir := filepath.Join(root, "projects", "p")
	if err := a.MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "compose.yaml")
	if err := a.WriteFile(f, []byte("x"), a.File()); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]fs.FileMode{filepath.Join(root, "projects"): 0o750, dir: 0o750, f: 0o640} {
		if m, g := stat(t, p); m != want || g != gid {
			t.Errorf("%s: mode %o group %d, want %o group %d", p, m, g, want, gid)
		}
	}
	// Set moves an owner-only file to the group.
	old := filepath.Join(root, "old")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Set(old, a.File()); err != nil {
		t.Fatal(err)
	}
	if m, g := stat(t, old); m != 0o640 || g != gid {
		t.Errorf("after Set: mode %o group %d", m, g)
	}
}
