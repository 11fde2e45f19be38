package suite

import (
	"errors"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size (e.g. "4m") on dir (made if missing) for
// the rest of the test: a small filesystem the test can fill. Without
// root it skips t.
func Tmpfs(t testing.TB, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	// Detached, not unmounted: it may still be in use by a process that
	// stops after this cleanup; the kernel frees it once unused.
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// FillDisk writes a file at path until its filesystem is full; removing
// it makes room again.
func FillDisk(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 64*1024)
	for _, n := range []int{len(b), 1} { // small writes fit in what a big one left
		for {
			if _, err := f.Write(b[:n]); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
}
