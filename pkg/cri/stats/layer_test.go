package stats

import "testing"

// TestUpperDirDriver: only the overlay graph drivers name a writable
// layer's directory; the containerd image store never does, whatever its
// snapshotter is called.
func TestUpperDirDriver(t *testing.T) {
	snap := [][2]string{{"driver-type", "io.containerd.snapshotter.v1"}}
	for _, c := range []struct {
		driver string
		status [][2]string
		want   bool
	}{
		{"overlay2", [][2]string{{"Backing Filesystem", "extfs"}, {"Supports d_type", "true"}}, true},
		{"fuse-overlayfs", nil, true},
		{"overlay", nil, true},
		{"overlayfs", snap, false},
		{"overlay2", snap, false},
		{"vfs", nil, false},
		{"vfs", snap, false},
		{"btrfs", nil, false},
		{"zfs", nil, false},
	} {
		if got := upperDirDriver(c.driver, c.status); got != c.want {
			t.Errorf("upperDirDriver(%q, %v) = %v, want %v", c.driver, c.status, got, c.want)
		}
	}
}
