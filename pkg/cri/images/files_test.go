package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tarOf builds an export-like tar from entries.
func tarOf(t *testing.T, hs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = h.Linkname // the content, for brevity
			h.Linkname = ""
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if body != "" {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func TestExtractTar(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (owners)")
	}
	mtime := time.Unix(1e9, 0)
	dest := filepath.Join(t.TempDir(), "rootfs")
	outside := t.TempDir()
	b := tarOf(t,
		&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mtime},
		&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 0, Gid: 0, ModTime: mtime, Linkname: "#!elf"},
		&tar.Header{Name: "bin/ls", Typeflag: tar.TypeLink, Linkname: "bin/busybox"},
		&tar.Header{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "/bin/busybox"},
		&tar.Header{Name: "home/user/notes", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1000, Gid: 50000, ModTime: mtime, Linkname: "hello"},
		&tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		// Attempts to write outside: a "..", and a file under a symbolic
		// link that points out.
		&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "x"},
		&tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside},
	)
	if err := extractTar(b, dest); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dest, "bin/busybox"))
	if err != nil || st.Mode()&fs.ModeSetuid == 0 || st.Mode().Perm() != 0o755 || !st.ModTime().Equal(mtime) {
		t.Errorf("bin/busybox: %v %v", st.Mode(), err)
	}
	if l, err := os.Stat(filepath.Join(dest, "bin/ls")); err != nil || !os.SameFile(l, st) {
		t.Errorf("bin/ls is not a hard link of bin/busybox: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(dest, "bin/sh")); err != nil || l != "/bin/busybox" {
		t.Errorf("bin/sh -> %q %v", l, err)
	}
	nt, err := os.Stat(filepath.Join(dest, "home/user/notes"))
	if err != nil {
		t.Fatal(err)
	}
	if s := nt.Sys().(*syscall.Stat_t); s.Uid != 1000 || s.Gid != 50000 || nt.Mode().Perm() != 0o640 {
		t.Errorf("notes: %d:%d %v", s.Uid, s.Gid, nt.Mode())
	}
	if _, err := os.Lstat(filepath.Join(dest, "dev/null")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a device node was made: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dest), "escape")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("an entry with .. was written outside")
	}
	if st, err := os.Stat(filepath.Join(dest, "bin")); err != nil || !st.ModTime().Equal(mtime) {
		t.Errorf("bin's time %v %v, want %v", st.ModTime(), err, mtime)
	}

	// A file under a link that leads out is refused, nothing is written.
	b = tarOf(t,
		&tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside},
		&tar.Header{Name: "out/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Linkname: "pwned"},
	)
	if err := extractTar(b, filepath.Join(t.TempDir(), "r2")); err == nil {
		t.Error("a file under a link out of the root was accepted")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("written outside: %v", ents)
	}
}

func TestResolveIn(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/lib", "etc/app", "data"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"lib":           "usr/lib",   // relative
		"etc/conf":      "/etc/app",  // absolute: inside the image
		"data/up":       "../../../", // climbs above the root: stops at it
		"data/loop":     "loop",
		"etc/host-etc":  "/../../etc", // the host's /etc: the image's
		"data/dangling": "/nothing",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for rel, want := range map[string]string{
		"etc":             "etc",
		"lib":             "usr/lib",
		"etc/conf":        "etc/app",
		"data/up/etc/app": "etc/app",
		"etc/host-etc":    "etc",
		"./usr//lib/":     "usr/lib",
	} {
		got, err := resolveIn(root, rel)
		if err != nil || got != filepath.Join(root, want) {
			t.Errorf("resolveIn(%q) = %q, %v; want %q", rel, got, err, filepath.Join(root, want))
		}
	}
	for _, rel := range []string{"missing", "data/loop", "data/dangling"} {
		if got, err := resolveIn(root, rel); err == nil {
			t.Errorf("resolveIn(%q) = %q, want an error", rel, got)
		}
	}
	if p, err := resolveIn(root, "data/up"); err != nil || strings.TrimSuffix(p, "/") != root {
		t.Errorf("data/up = %q %v, want the root", p, err)
	}
}
