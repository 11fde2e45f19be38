package crilog

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cri-compose/cri-compose/pkg/cri/perm"
)

// TestWriterAccess: a log is 0640 (containerd's), the folders made for it
// are closed to other users, an older file left readable by everyone is
// tightened, and a link planted at the log path is not followed.
func TestWriterAccess(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "pod", "web", "0.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	for p, want := range map[string]os.FileMode{path: 0o640, filepath.Dir(path): 0o700, filepath.Join(root, "pod"): 0o700} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %o", p, fi.Mode(), err, want)
		}
	}

	old := filepath.Join(root, "old.log")
	if err := os.WriteFile(old, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err = OpenWriter(old)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if fi, _ := os.Stat(old); fi.Mode().Perm() != LogFileMode {
		t.Errorf("old 0644 log reopened: mode %o, want %o", fi.Mode().Perm(), LogFileMode)
	}

	target := filepath.Join(root, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenWriter(link); err == nil {
		t.Error("OpenWriter followed a link at the log path")
	}

	if os.Getuid() != 0 {
		t.Skip("giving a log to another group needs root")
	}
	const gid = 65534
	gpath := filepath.Join(root, "group", "web", "0.log")
	w, err = OpenWriterFor(gpath, perm.Group(gid))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	for p, want := range map[string]os.FileMode{gpath: 0o640, filepath.Dir(gpath): 0o750} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if g := fi.Sys().(*syscall.Stat_t).Gid; fi.Mode().Perm() != want || g != gid {
			t.Errorf("%s: mode %o group %d, want %o group %d", p, fi.Mode().Perm(), g, want, gid)
		}
	}
}
