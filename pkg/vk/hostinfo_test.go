package vk

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemTotal: the Node's memory is the machine's, as the kernel counts
// it for sysinfo(2) too.
func TestMemTotal(t *testing.T) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Fatal(err)
	}
	want := int64(si.Totalram) * int64(si.Unit)
	if got := memTotal(); got != want {
		t.Errorf("memTotal %d, want %d (sysinfo)", got, want)
	}
}
