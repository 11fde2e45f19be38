package suite

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRemoveTreeKeepsMountedFiles bind-mounts a folder below the tree to
// remove, as critest's mount propagation specs can leave one, and checks
// that its files survive. It needs root, as those specs do.
func TestRemoveTreeKeepsMountedFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount")
	}
	src := t.TempDir()
	precious := filepath.Join(src, "precious")
	if err := os.WriteFile(precious, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	mnt := filepath.Join(tree, "pod", "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// src at mnt, and again at mnt/sub: nested mounts.
	if err := syscall.Mount(src, mnt, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount here: %v", err)
	}
	if err := syscall.Mount(src, filepath.Join(mnt, "sub"), "", syscall.MS_BIND, ""); err != nil {
		_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		t.Fatal(err)
	}
	if err := RemoveTree(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", tree, err)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "keep" {
		t.Errorf("the mounted folder's file is gone: %q, %v", b, err)
	}
	if m, _ := MountsUnder(tree); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/tmp/a\040b`); got != "/tmp/a b" {
		t.Errorf("got %q", got)
	}
}
