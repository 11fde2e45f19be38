package suite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100
// on every Linux architecture Docker runs on.
const clockTicks = 100

// CPUTime is the user+system CPU time a process has used (self), and that
// its children it has waited for used (reaped: a containerd shim's runc
// and exec'd processes, which are gone before anyone could read their
// own).
func CPUTime(pid int) (self, reaped time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces: count from its end.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	var t [4]uint64 // utime, stime, cutime, cstime: fields 14 to 17
	var errs []error
	for k := range t {
		var err error
		t[k], err = strconv.ParseUint(f[11+k], 10, 64)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	tick := func(n uint64) time.Duration { return time.Duration(n) * time.Second / clockTicks }
	return tick(t[0] + t[1]), tick(t[2] + t[3]), nil
}

// PidOf finds the oldest process whose command name is comm (dockerd,
// containerd): 0 if none.
func PidOf(comm string) int {
	best := 0
	for _, pid := range PidsOf(func(c string) bool { return c == comm }) {
		if best == 0 || pid < best {
			best = pid
		}
	}
	return best
}

// PidsOf is every process whose command name (/proc/<pid>/comm) match
// takes.
func PidsOf(match func(comm string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && match(strings.TrimSpace(string(b))) {
			pids = append(pids, pid)
		}
	}
	return pids
}
