package suite

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// RemoveTree removes dir, first detaching every mount below it. A test's
// folder may hold what it mounted (critest's mount propagation specs
// bind-mount host folders such as /etc; a node keeps its pods' secret
// volumes on tmpfs), a test that fails half-way can leave such a mount
// behind, and removing through it would delete the mounted files, or fail
// on a busy mount point. When a mount cannot be detached, dir is left in
// place.
func RemoveTree(dir string) error {
	for attempt := 0; attempt < 3; attempt++ {
		mounts, err := MountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return os.RemoveAll(dir)
		}
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				fmt.Fprintf(os.Stderr, "unmount %s: %v\n", m, err)
			}
		}
	}
	return fmt.Errorf("mounts remain below %s: left in place", dir)
}

// MountsUnder lists the mount points of this mount namespace at or below
// dir, deepest first (so that they can be detached in that order).
func MountsUnder(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": the 5th field.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// Deepest first.
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out, sc.Err()
}

// unescapeMountinfo decodes the octal escapes (\040 for a space) of a
// mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
