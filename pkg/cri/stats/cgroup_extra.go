package stats

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/cgroups"
	cgroupv1 "github.com/opencontainers/cgroups/fs"
	cgroupv2 "github.com/opencontainers/cgroups/fs2"
	"github.com/opencontainers/cgroups/fscommon"
	"github.com/prometheus/procfs"
)

// cgroupExtra is what the CRI metrics (ListPodSandboxMetrics, the
// cAdvisor-named series kubelet serves on /metrics/cadvisor) need beyond
// the stats: read only while a client asks for metrics (stats.go), since
// it is a dozen more files per container and a walk of its processes'
// file descriptors.
type cgroupExtra struct {
	// CPU time split, in ns (v1 cpuacct.stat, v2 cpu.stat).
	cpuUser, cpuSystem uint64
	hasCPUSplit        bool
	// CFS bandwidth control (v1 cpu.stat of the cpu controller, v2
	// cpu.stat): periods elapsed, periods throttled, time throttled (ns).
	cfsPeriods, cfsThrottled, cfsThrottledNanos uint64
	hasCFS                                      bool

	mappedFile  uint64 // v1 total_mapped_file, v2 file_mapped
	swap        uint64 // v1 total_swap, v2 memory.swap.current
	kernel      uint64 // v1 memory.kmem.usage_in_bytes, v2 memory.stat kernel
	hasKernel   bool
	maxUsage    uint64 // v1 memory.max_usage_in_bytes, v2 memory.peak
	hasMaxUsage bool
	failcnt     uint64 // v1 memory.failcnt, v2 memory.events max
	hasFailcnt  bool
	oomKills    uint64 // v1 memory.oom_control oom_kill, v2 memory.events oom_kill
	hasOOM      bool

	// Tasks: pids.current counts threads; pids.max is 0 without a limit.
	threads, threadsMax uint64
	hasThreads          bool
	// The processes in the cgroup (cgroup.procs), and their open files.
	procs      uint64
	fds        uint64
	sockets    uint64
	hasProcs   bool
	spec       cgroupSpec
	blkio      []blkioStat
	hasBlkio   bool
	blkioNames []string // device names, parallel to blkio
}

// cgroupSpec is the cgroup's configuration, as cAdvisor's container_spec_*.
type cgroupSpec struct {
	cpuPeriod, cpuQuota, cpuShares uint64 // µs, µs (0: no quota), shares
	hasCPU                         bool
	memLimit                       uint64 // 0: none
	memSwapLimit                   uint64 // 0: none, or swap not accounted
	memReservation                 uint64 // 0: none
	hasMem                         bool
}

// blkioStat is one block device's I/O by the cgroup.
type blkioStat struct {
	major, minor          uint64
	readBytes, writeBytes uint64
	reads, writes         uint64
	hasBytes, hasServiced bool
}

// readExtra reads the metrics-only files of a cgroup; proc ("/proc") is
// where the processes listed in cgroup.procs are looked at. Files a kernel
// or a mount lacks leave their figures unset; only cgroup.procs missing
// (the cgroup is gone) is an error.
func (p cgroupPaths) readExtra(proc string) (*cgroupExtra, error) {
	x := &cgroupExtra{}
	procsDir := p.memory
	if p.pids != "" {
		procsDir = p.pids
	}
	pids, err := readPids(filepath.Join(procsDir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	x.procs, x.hasProcs = uint64(len(pids)), true
	x.fds, x.sockets = countFDs(proc, pids)
	if p.v2 {
		p.readExtraV2(x)
	} else {
		p.readExtraV1(x)
	}
	if p.pids != "" {
		if n, err := fscommon.GetCgroupParamUint(p.pids, "pids.current"); err == nil {
			x.threads, x.hasThreads = n, true
			m, _ := fscommon.GetCgroupParamUint(p.pids, "pids.max")
			x.threadsMax = limitOrZero(m) // "max": 0
		}
	}
	x.blkioNames = make([]string, len(x.blkio))
	for i, b := range x.blkio {
		x.blkioNames[i] = blockDeviceName(filepath.Join(filepath.Dir(proc), "sys"), b.major, b.minor)
	}
	return x, nil
}

// readExtraV1 reads the counters through runc's cgroup v1 readers; only
// the limits and settings cAdvisor reports as container_spec_*, and
// memory.oom_control, which the readers leave out, are read here.
func (p cgroupPaths) readExtraV1(x *cgroupExtra) {
	st := cgroups.NewStats()
	// The readers take a missing folder for zeros: the files say whether
	// the figures are there.
	if exists(filepath.Join(p.cpu, "cpuacct.stat")) && (&cgroupv1.CpuacctGroup{}).GetStats(p.cpu, st) == nil {
		u := st.CpuStats.CpuUsage
		x.cpuUser, x.cpuSystem, x.hasCPUSplit = u.UsageInUsermode, u.UsageInKernelmode, true
	}
	if p.cpuCtl != "" {
		if exists(filepath.Join(p.cpuCtl, "cpu.stat")) && (&cgroupv1.CpuGroup{}).GetStats(p.cpuCtl, st) == nil {
			t := st.CpuStats.ThrottlingData
			x.cfsPeriods, x.cfsThrottled, x.cfsThrottledNanos, x.hasCFS = t.Periods, t.ThrottledPeriods, t.ThrottledTime, true
		}
		period, err1 := fscommon.GetCgroupParamUint(p.cpuCtl, "cpu.cfs_period_us")
		shares, err2 := fscommon.GetCgroupParamUint(p.cpuCtl, "cpu.shares")
		if err1 == nil && err2 == nil {
			x.spec.cpuPeriod, x.spec.cpuShares, x.spec.hasCPU = period, shares, true
			x.spec.cpuQuota, _ = fscommon.GetCgroupParamUint(p.cpuCtl, "cpu.cfs_quota_us") // -1 (none) reads as 0
		}
	}
	m := p.memory
	if exists(filepath.Join(m, "memory.stat")) && (&cgroupv1.MemoryGroup{}).GetStats(m, st) == nil {
		ms := st.MemoryStats
		x.mappedFile, x.swap = ms.Stats["total_mapped_file"], ms.Stats["total_swap"]
		x.maxUsage, x.failcnt, x.hasMaxUsage, x.hasFailcnt = ms.Usage.MaxUsage, ms.Usage.Failcnt, true, true
		// Kernel memory accounting is gone from some kernels' v1.
		x.kernel, x.hasKernel = ms.KernelUsage.Usage, exists(filepath.Join(m, "memory.kmem.usage_in_bytes"))
		x.spec.hasMem = true
		x.spec.memLimit = limitOrZero(ms.Usage.Limit)
		x.spec.memSwapLimit = limitOrZero(ms.SwapUsage.Limit) // 0 without swap accounting
		r, _ := fscommon.GetCgroupParamUint(m, "memory.soft_limit_in_bytes")
		x.spec.memReservation = limitOrZero(r)
	}
	if oc, err := keyValues(m, "memory.oom_control"); err == nil {
		x.oomKills, x.hasOOM = oc["oom_kill"] // since Linux 4.13
	}
	if p.blkio != "" && exists(filepath.Join(p.blkio, "blkio.throttle.io_service_bytes")) {
		if err := (&cgroupv1.BlkioGroup{}).GetStats(p.blkio, st); err == nil {
			x.blkio, x.hasBlkio = blkioFrom(st.BlkioStats), true
		}
	}
}

// readExtraV2 is readExtraV1 for the unified hierarchy; memory.events and
// the settings are read here.
func (p cgroupPaths) readExtraV2(x *cgroupExtra) {
	d := p.memory
	m, err := cgroupv2.NewManager(&cgroups.Cgroup{}, d)
	if err != nil {
		return
	}
	// An error names the files that could not be read; the others are in st.
	st, _ := m.Stats(&cgroups.StatsOptions{Controllers: cgroups.CPU | cgroups.Memory | cgroups.IO})
	if st == nil {
		return
	}
	if exists(filepath.Join(d, "cpu.stat")) {
		u := st.CpuStats.CpuUsage
		x.cpuUser, x.cpuSystem, x.hasCPUSplit = u.UsageInUsermode, u.UsageInKernelmode, true
		// cpu.stat has the throttling figures only where the cpu
		// controller is on, as it has cpu.max.
		if exists(filepath.Join(d, "cpu.max")) {
			t := st.CpuStats.ThrottlingData
			x.cfsPeriods, x.cfsThrottled, x.cfsThrottledNanos, x.hasCFS = t.Periods, t.ThrottledPeriods, t.ThrottledTime, true
		}
	}
	if max, err := fscommon.GetCgroupParamString(d, "cpu.max"); err == nil {
		// "max 100000" or "20000 100000"
		if f := strings.Fields(max); len(f) == 2 {
			x.spec.cpuPeriod, _ = strconv.ParseUint(f[1], 10, 64)
			x.spec.cpuQuota, _ = strconv.ParseUint(f[0], 10, 64) // "max": 0
			x.spec.hasCPU = true
		}
	}
	if w, err := fscommon.GetCgroupParamUint(d, "cpu.weight"); err == nil && w > 0 {
		// The inverse of the shares → weight conversion of runc and systemd.
		x.spec.cpuShares = 2 + (w-1)*262142/9999
	}
	if exists(filepath.Join(d, "memory.stat")) {
		ms := st.MemoryStats
		x.mappedFile = ms.Stats["file_mapped"]
		if k, ok := ms.Stats["kernel"]; ok { // since Linux 5.18
			x.kernel, x.hasKernel = k, true
		} else {
			x.kernel, x.hasKernel = ms.Stats["kernel_stack"]+ms.Stats["slab"]+ms.Stats["sock"]+ms.Stats["percpu"], true
		}
		x.swap = ms.SwapOnlyUsage.Usage
		x.maxUsage, x.hasMaxUsage = ms.Usage.MaxUsage, exists(filepath.Join(d, "memory.peak")) // since Linux 5.19
	}
	if ev, err := keyValues(d, "memory.events"); err == nil {
		x.failcnt, x.oomKills, x.hasFailcnt, x.hasOOM = ev["max"], ev["oom_kill"], true, true
	}
	if l, err := fscommon.GetCgroupParamUint(d, "memory.max"); err == nil {
		x.spec.hasMem = true
		x.spec.memLimit = limitOrZero(l)
		sw, _ := fscommon.GetCgroupParamUint(d, "memory.swap.max")
		x.spec.memSwapLimit = limitOrZero(sw)
		low, _ := fscommon.GetCgroupParamUint(d, "memory.low")
		x.spec.memReservation = limitOrZero(low)
	}
	if exists(filepath.Join(d, "io.stat")) {
		x.blkio, x.hasBlkio = blkioFrom(st.BlkioStats), true
	}
}

// blkioFrom folds the readers' per-operation entries into one figure set
// per device, in device order.
func blkioFrom(b cgroups.BlkioStats) []blkioStat {
	byDev := map[[2]uint64]*blkioStat{}
	dev := func(e cgroups.BlkioStatEntry) *blkioStat {
		k := [2]uint64{e.Major, e.Minor}
		s := byDev[k]
		if s == nil {
			s = &blkioStat{major: e.Major, minor: e.Minor}
			byDev[k] = s
		}
		return s
	}
	add := func(entries []cgroups.BlkioStatEntry, bytes bool) {
		for _, e := range entries {
			if e.Op != "Read" && e.Op != "Write" {
				continue // Sync, Async, Total and the like
			}
			s := dev(e)
			read, write, has := &s.reads, &s.writes, &s.hasServiced
			if bytes {
				read, write, has = &s.readBytes, &s.writeBytes, &s.hasBytes
			}
			if e.Op == "Read" {
				*read = e.Value
			} else {
				*write = e.Value
			}
			*has = true
		}
	}
	add(b.IoServiceBytesRecursive, true)
	add(b.IoServicedRecursive, false)
	out := make([]blkioStat, 0, len(byDev))
	for _, s := range byDev {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].major != out[j].major {
			return out[i].major < out[j].major
		}
		return out[i].minor < out[j].minor
	})
	return out
}

// keyValues reads a "key value" per line file (memory.events,
// memory.oom_control) once, with the cgroup library's line parser.
func keyValues(dir, file string) (map[string]uint64, error) {
	b, err := cgroups.ReadFile(dir, file)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(b, "\n") {
		if k, v, err := fscommon.ParseKeyValue(line); err == nil {
			out[k] = v
		}
	}
	return out, nil
}

// limitOrZero maps a cgroup v1 "no limit" (about 2^63) to 0.
func limitOrZero(v uint64) uint64 {
	if v >= unlimited {
		return 0
	}
	return v
}

// readPids reads cgroup.procs.
func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

// countFDs counts the open file descriptors of the processes pids, and
// those of them that are sockets, from /proc/<pid>/fd under proc. A
// process that ends meanwhile counts nothing.
func countFDs(proc string, pids []int) (fds, sockets uint64) {
	pfs, err := procfs.NewFS(proc)
	if err != nil {
		return 0, 0
	}
	for _, pid := range pids {
		p, err := pfs.Proc(pid)
		if err != nil {
			continue
		}
		targets, err := p.FileDescriptorTargets()
		if err != nil {
			continue
		}
		for _, t := range targets {
			fds++
			if strings.HasPrefix(t, "socket:") {
				sockets++
			}
		}
	}
	return fds, sockets
}

var devNames sync.Map // "sys|maj:min" → "/dev/sda"

// blockDeviceName names a block device as cAdvisor does ("/dev/sda"), from
// sysfs (sys: "/sys"); "maj:min" when sysfs does not know it.
func blockDeviceName(sys string, maj, min uint64) string {
	dev := strconv.FormatUint(maj, 10) + ":" + strconv.FormatUint(min, 10)
	key := sys + "|" + dev
	if v, ok := devNames.Load(key); ok {
		return v.(string)
	}
	name := dev
	if b, err := os.ReadFile(filepath.Join(sys, "dev", "block", dev, "uevent")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "DEVNAME="); ok && v != "" {
				name = "/dev/" + v
			}
		}
	}
	devNames.Store(key, name)
	return name
}
