package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupFS knows where this host mounts its cgroup hierarchies, read once
// from /proc/self/mountinfo, so that any container's cgroup files can be
// found from /proc/<pid>/cgroup whatever its cgroup parent or driver.
type cgroupFS struct {
	proc string            // "/proc"
	v1   map[string]mount1 // controller (cpuacct, memory, pids) → mount
	v2   *mount1           // the unified hierarchy, when mounted
}

type mount1 struct {
	point string // where it is mounted
	root  string // the hierarchy path at the mount point
}

// cgroupPaths are one container's cgroup directories.
type cgroupPaths struct {
	v2                bool
	cpu, memory, pids string // v1: one directory per controller; v2: all the same
	// cpuCtl (v1: the cpu controller's, where cpu.stat holds the CFS
	// figures; often cpu's and cpuacct's are one) and blkio are read for
	// the CRI metrics only ("": not mounted).
	cpuCtl, blkio string
}

// loadCgroupFS reads the mount table under proc ("/proc").
func loadCgroupFS(proc string) (*cgroupFS, error) {
	b, err := os.ReadFile(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	fs := &cgroupFS{proc: proc, v1: map[string]mount1{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// 32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 3 {
			continue
		}
		m := mount1{point: unescapeMount(f[4]), root: unescapeMount(f[3])}
		switch p[0] {
		case "cgroup":
			for _, opt := range strings.Split(p[2], ",") {
				switch opt {
				case "cpuacct", "memory", "pids", "cpu", "blkio":
					if _, dup := fs.v1[opt]; !dup {
						fs.v1[opt] = m
					}
				}
			}
		case "cgroup2":
			if fs.v2 == nil {
				fs.v2 = &m
			}
		}
	}
	if fs.v1["cpuacct"].point == "" && fs.v2 == nil {
		return nil, fmt.Errorf("cgroup mounts: no cpuacct or unified hierarchy in %s/self/mountinfo", proc)
	}
	return fs, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// v1Mode reports whether the v1 cpuacct and memory controllers are mounted:
// then they hold the figures, even when a (controller-less, "hybrid")
// unified hierarchy is mounted too.
func (fs *cgroupFS) v1Mode() bool {
	return fs.v1["cpuacct"].point != "" && fs.v1["memory"].point != ""
}

// paths finds the cgroup directories of process pid, and checks that they
// belong to container id (the engine names its cgroups after the id with
// every driver), so that a recycled pid is never mistaken for it.
func (fs *cgroupFS) paths(pid int, id string) (cgroupPaths, error) {
	b, err := os.ReadFile(filepath.Join(fs.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return cgroupPaths{}, err
	}
	byCtl := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// 4:memory:/docker/<id>  or  0::/system.slice/docker-<id>.scope
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			byCtl[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			byCtl[c] = parts[2]
		}
	}
	join := func(m mount1, p string) (string, error) {
		if !strings.Contains(p, id) {
			return "", fmt.Errorf("cgroup %q of pid %d is not container %.12s's", p, pid, id)
		}
		if m.root != "/" && m.root != "" {
			rel, ok := strings.CutPrefix(p, m.root)
			if !ok {
				return "", fmt.Errorf("cgroup %q of pid %d is outside the mount of %s", p, pid, m.root)
			}
			p = rel
		}
		return filepath.Join(m.point, p), nil
	}
	var out cgroupPaths
	if fs.v1Mode() {
		if out.cpu, err = join(fs.v1["cpuacct"], byCtl["cpuacct"]); err != nil {
			return cgroupPaths{}, err
		}
		if out.memory, err = join(fs.v1["memory"], byCtl["memory"]); err != nil {
			return cgroupPaths{}, err
		}
		if m, ok := fs.v1["pids"]; ok && byCtl["pids"] != "" {
			out.pids, _ = join(m, byCtl["pids"])
		}
		if m, ok := fs.v1["cpu"]; ok && byCtl["cpu"] != "" {
			out.cpuCtl, _ = join(m, byCtl["cpu"])
		}
		if m, ok := fs.v1["blkio"]; ok && byCtl["blkio"] != "" {
			out.blkio, _ = join(m, byCtl["blkio"])
		}
		return out, nil
	}
	p, ok := byCtl[""]
	if fs.v2 == nil || !ok {
		return cgroupPaths{}, fmt.Errorf("pid %d has no cgroup this host mounts", pid)
	}
	dir, err := join(*fs.v2, p)
	if err != nil {
		return cgroupPaths{}, err
	}
	return cgroupPaths{v2: true, cpu: dir, memory: dir, pids: dir, cpuCtl: dir, blkio: dir}, nil
}

// parent is the cgroup one level up: the pod's, when kubelet gave the pod a
// cgroup parent.
func (p cgroupPaths) parent() cgroupPaths {
	up := func(d string) string {
		if d == "" {
			return ""
		}
		return filepath.Dir(d)
	}
	return cgroupPaths{v2: p.v2, cpu: up(p.cpu), memory: up(p.memory), pids: up(p.pids), cpuCtl: up(p.cpuCtl), blkio: up(p.blkio)}
}

// cgroupUsage is what one read of a cgroup's files gives.
type cgroupUsage struct {
	cpuNanos uint64 // cumulative CPU time
	memory   memUsage
	procs    uint64
	hasProcs bool
}

type memUsage struct {
	usage, workingSet, rss, cache uint64
	pgfault, pgmajfault           uint64
	limit                         uint64 // 0: none
}

// unlimited is the smallest "no limit" a cgroup v1 reports (the kernel
// rounds 2^63-1 down to a page).
const unlimited = 1 << 62

// read reads the usage files of one cgroup: cgroup v1 cpuacct.usage,
// memory.usage_in_bytes, memory.limit_in_bytes, memory.stat (total_*, which
// count the children as the pod's cgroup needs) and pids.current; v2
// cpu.stat usage_usec, memory.current, memory.max, memory.stat, pids.current.
func (p cgroupPaths) read() (cgroupUsage, error) {
	var u cgroupUsage
	var err error
	var stat map[string]uint64
	if p.v2 {
		cs, err := readKV(filepath.Join(p.cpu, "cpu.stat"))
		if err != nil {
			return u, err
		}
		u.cpuNanos = cs["usage_usec"] * 1000
		if u.memory.usage, err = readUint(filepath.Join(p.memory, "memory.current")); err != nil {
			return u, err
		}
		if u.memory.limit, err = readUint(filepath.Join(p.memory, "memory.max")); err != nil {
			u.memory.limit = 0 // "max"
		}
		if stat, err = readKV(filepath.Join(p.memory, "memory.stat")); err != nil {
			return u, err
		}
		u.memory.rss, u.memory.cache = stat["anon"], stat["file"]
		u.memory.pgfault, u.memory.pgmajfault = stat["pgfault"], stat["pgmajfault"]
		u.memory.workingSet = sub(u.memory.usage, stat["inactive_file"])
	} else {
		if u.cpuNanos, err = readUint(filepath.Join(p.cpu, "cpuacct.usage")); err != nil {
			return u, err
		}
		if u.memory.usage, err = readUint(filepath.Join(p.memory, "memory.usage_in_bytes")); err != nil {
			return u, err
		}
		if u.memory.limit, err = readUint(filepath.Join(p.memory, "memory.limit_in_bytes")); err != nil || u.memory.limit >= unlimited {
			u.memory.limit = 0
		}
		if stat, err = readKV(filepath.Join(p.memory, "memory.stat")); err != nil {
			return u, err
		}
		u.memory.rss, u.memory.cache = stat["total_rss"], stat["total_cache"]
		u.memory.pgfault, u.memory.pgmajfault = stat["total_pgfault"], stat["total_pgmajfault"]
		u.memory.workingSet = sub(u.memory.usage, stat["total_inactive_file"])
	}
	if p.pids != "" {
		if n, err := readUint(filepath.Join(p.pids, "pids.current")); err == nil {
			u.procs, u.hasProcs = n, true
		}
	}
	return u, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// readUint reads a file holding one number.
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
}

// readKV reads a "key value" per line file (memory.stat, cpu.stat).
func readKV(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, 64)
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			out[string(k)] = n
		}
	}
	return out, nil
}

// ifaceUsage is one network interface's counters.
type ifaceUsage struct {
	name                                    string
	rxBytes, rxPackets, rxErrors, rxDropped uint64
	txBytes, txPackets, txErrors, txDropped uint64
}

// readNetDev reads the interfaces of pid's network namespace from
// /proc/<pid>/net/dev, leaving out the loopback.
func readNetDev(proc string, pid int) ([]ifaceUsage, error) {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "net", "dev"))
	if err != nil {
		return nil, err
	}
	return parseNetDev(b), nil
}

func parseNetDev(b []byte) []ifaceUsage {
	var out []ifaceUsage
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if name == "lo" || len(f) < 16 {
			continue
		}
		n := make([]uint64, 16)
		for i := range n {
			n[i], _ = strconv.ParseUint(f[i], 10, 64)
		}
		out = append(out, ifaceUsage{name: name,
			rxBytes: n[0], rxPackets: n[1], rxErrors: n[2], rxDropped: n[3],
			txBytes: n[8], txPackets: n[9], txErrors: n[10], txDropped: n[11]})
	}
	return out
}
