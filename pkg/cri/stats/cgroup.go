package stats

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	cgroupv1 "github.com/opencontainers/cgroups/fs"
	cgroupv2 "github.com/opencontainers/cgroups/fs2"
	"github.com/prometheus/procfs"
)

// cgroupFS knows where this host mounts its cgroup hierarchies, read once
// from /proc/self/mountinfo, so that any container's cgroup files can be
// found from /proc/<pid>/cgroup whatever its cgroup parent or driver.
type cgroupFS struct {
	proc procfs.FS         // of "/proc"
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
	pfs, err := procfs.NewFS(proc)
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	f, err := os.Open(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	defer f.Close()
	// moby/sys/mountinfo, not procfs, for the mount table: it undoes the
	// octal escapes (\040 for a space) of the paths.
	mounts, err := mountinfo.GetMountsFromReader(f, mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, fmt.Errorf("cgroup mounts: %w", err)
	}
	fs := &cgroupFS{proc: pfs, v1: map[string]mount1{}}
	for _, mi := range mounts {
		m := mount1{point: mi.Mountpoint, root: mi.Root}
		switch mi.FSType {
		case "cgroup":
			for _, opt := range strings.Split(mi.VFSOptions, ",") {
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
	proc, err := fs.proc.Proc(pid)
	if err != nil {
		return cgroupPaths{}, err
	}
	cgs, err := proc.Cgroups()
	if err != nil {
		return cgroupPaths{}, err
	}
	byCtl := map[string]string{}
	for _, cg := range cgs {
		// 4:memory:/docker/<id>  or  0::/system.slice/docker-<id>.scope
		if cg.HierarchyID == 0 && len(cg.Controllers) == 0 {
			byCtl[""] = cg.Path
			continue
		}
		for _, c := range cg.Controllers {
			byCtl[c] = cg.Path
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

// read reads the usage counters of one cgroup through runc's cgroup
// readers (github.com/opencontainers/cgroups): cgroup v1 cpuacct, memory
// (memory.stat's total_* figures, which count the children as the pod's
// cgroup needs) and pids; v2 cpu.stat, memory.current, memory.max,
// memory.stat and pids. The readers take a missing file for a zero: a
// cgroup that is gone (its files with it) is told apart afterwards.
func (p cgroupPaths) read() (cgroupUsage, error) {
	var u cgroupUsage
	st := cgroups.NewStats()
	var must []string // files only a removed cgroup lacks
	// Tasks from pids.current only: without it runc's v2 reader counts
	// cgroup.procs, which are processes.
	hasPids := p.pids != "" && exists(filepath.Join(p.pids, "pids.current"))
	if p.v2 {
		m, err := cgroupv2.NewManager(&cgroups.Cgroup{}, p.memory)
		if err != nil {
			return u, err
		}
		ctl := cgroups.CPU | cgroups.Memory
		if hasPids {
			ctl |= cgroups.Pids
		}
		if st, err = m.Stats(&cgroups.StatsOptions{Controllers: ctl}); err != nil {
			return u, err
		}
		must = []string{filepath.Join(p.cpu, "cpu.stat"), filepath.Join(p.memory, "memory.current"), filepath.Join(p.memory, "memory.stat")}
		ms := st.MemoryStats.Stats
		u.memory.rss, u.memory.cache = ms["anon"], ms["file"]
		u.memory.pgfault, u.memory.pgmajfault = ms["pgfault"], ms["pgmajfault"]
		u.memory.workingSet = sub(st.MemoryStats.Usage.Usage, ms["inactive_file"])
	} else {
		if err := (&cgroupv1.CpuacctGroup{}).GetStats(p.cpu, st); err != nil {
			return u, err
		}
		if err := (&cgroupv1.MemoryGroup{}).GetStats(p.memory, st); err != nil {
			return u, err
		}
		must = []string{filepath.Join(p.cpu, "cpuacct.usage"), filepath.Join(p.memory, "memory.stat")}
		ms := st.MemoryStats.Stats
		u.memory.rss, u.memory.cache = ms["total_rss"], ms["total_cache"]
		u.memory.pgfault, u.memory.pgmajfault = ms["total_pgfault"], ms["total_pgmajfault"]
		u.memory.workingSet = sub(st.MemoryStats.Usage.Usage, ms["total_inactive_file"])
		if hasPids {
			if err := (&cgroupv1.PidsGroup{}).GetStats(p.pids, st); err != nil {
				return u, err
			}
		}
	}
	for _, f := range must {
		if !exists(f) {
			return cgroupUsage{}, fmt.Errorf("cgroup file %s: %w", f, os.ErrNotExist)
		}
	}
	u.cpuNanos = st.CpuStats.CpuUsage.TotalUsage
	u.memory.usage = st.MemoryStats.Usage.Usage
	u.memory.limit = limitOrZero(st.MemoryStats.Usage.Limit) // v1 about 2^63, v2 "max" 2^64-1: none
	if hasPids {
		u.procs, u.hasProcs = st.PidsStats.Current, true
	}
	return u, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// ifaceUsage is one network interface's counters.
type ifaceUsage struct {
	name                                    string
	rxBytes, rxPackets, rxErrors, rxDropped uint64
	txBytes, txPackets, txErrors, txDropped uint64
}

// readNetDev reads the interfaces of pid's network namespace from
// /proc/<pid>/net/dev under proc, leaving out the loopback, by name.
func readNetDev(proc string, pid int) ([]ifaceUsage, error) {
	pfs, err := procfs.NewFS(proc)
	if err != nil {
		return nil, err
	}
	p, err := pfs.Proc(pid)
	if err != nil {
		return nil, err
	}
	dev, err := p.NetDev()
	if err != nil {
		return nil, err
	}
	out := make([]ifaceUsage, 0, len(dev))
	for name, n := range dev {
		if name == "lo" {
			continue
		}
		out = append(out, ifaceUsage{name: name,
			rxBytes: n.RxBytes, rxPackets: n.RxPackets, rxErrors: n.RxErrors, rxDropped: n.RxDropped,
			txBytes: n.TxBytes, txPackets: n.TxPackets, txErrors: n.TxErrors, txDropped: n.TxDropped})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}
