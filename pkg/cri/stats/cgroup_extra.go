package stats

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

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

// userHZ is the unit of cpuacct.stat: clock ticks, 100 a second on every
// Linux architecture cri-compose builds for.
const userHZ = 100

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
		if n, err := readUint(filepath.Join(p.pids, "pids.current")); err == nil {
			x.threads, x.hasThreads = n, true
			x.threadsMax, _ = readMax(filepath.Join(p.pids, "pids.max"))
		}
	}
	x.blkioNames = make([]string, len(x.blkio))
	for i, b := range x.blkio {
		x.blkioNames[i] = blockDeviceName(filepath.Join(filepath.Dir(proc), "sys"), b.major, b.minor)
	}
	return x, nil
}

func (p cgroupPaths) readExtraV1(x *cgroupExtra) {
	if st, err := readKV(filepath.Join(p.cpu, "cpuacct.stat")); err == nil {
		x.cpuUser, x.cpuSystem = st["user"]*(1e9/userHZ), st["system"]*(1e9/userHZ)
		x.hasCPUSplit = true
	}
	if p.cpuCtl != "" {
		if st, err := readKV(filepath.Join(p.cpuCtl, "cpu.stat")); err == nil {
			x.cfsPeriods, x.cfsThrottled, x.cfsThrottledNanos = st["nr_periods"], st["nr_throttled"], st["throttled_time"]
			x.hasCFS = true
		}
		period, err1 := readUint(filepath.Join(p.cpuCtl, "cpu.cfs_period_us"))
		shares, err2 := readUint(filepath.Join(p.cpuCtl, "cpu.shares"))
		if err1 == nil && err2 == nil {
			x.spec.cpuPeriod, x.spec.cpuShares, x.spec.hasCPU = period, shares, true
			x.spec.cpuQuota, _ = readInt(filepath.Join(p.cpuCtl, "cpu.cfs_quota_us")) // -1: none
		}
	}
	m := p.memory
	if st, err := readKV(filepath.Join(m, "memory.stat")); err == nil {
		x.mappedFile, x.swap = st["total_mapped_file"], st["total_swap"]
	}
	x.kernel, x.hasKernel = readUintOK(filepath.Join(m, "memory.kmem.usage_in_bytes"))
	x.maxUsage, x.hasMaxUsage = readUintOK(filepath.Join(m, "memory.max_usage_in_bytes"))
	x.failcnt, x.hasFailcnt = readUintOK(filepath.Join(m, "memory.failcnt"))
	if oc, err := readKV(filepath.Join(m, "memory.oom_control")); err == nil {
		x.oomKills, x.hasOOM = oc["oom_kill"] // since Linux 4.13
	}
	if l, ok := readUintOK(filepath.Join(m, "memory.limit_in_bytes")); ok {
		x.spec.hasMem = true
		x.spec.memLimit = limitOrZero(l)
		sw, _ := readUintOK(filepath.Join(m, "memory.memsw.limit_in_bytes"))
		x.spec.memSwapLimit = limitOrZero(sw)
		r, _ := readUintOK(filepath.Join(m, "memory.soft_limit_in_bytes"))
		x.spec.memReservation = limitOrZero(r)
	}
	if p.blkio != "" {
		x.blkio, x.hasBlkio = readBlkioV1(p.blkio)
	}
}

func (p cgroupPaths) readExtraV2(x *cgroupExtra) {
	d := p.memory
	if st, err := readKV(filepath.Join(d, "cpu.stat")); err == nil {
		x.cpuUser, x.cpuSystem, x.hasCPUSplit = st["user_usec"]*1000, st["system_usec"]*1000, true
		if _, ok := st["nr_periods"]; ok {
			x.cfsPeriods, x.cfsThrottled, x.cfsThrottledNanos = st["nr_periods"], st["nr_throttled"], st["throttled_usec"]*1000
			x.hasCFS = true
		}
	}
	if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil {
		// "max 100000" or "20000 100000"
		if f := strings.Fields(string(b)); len(f) == 2 {
			x.spec.cpuPeriod, _ = strconv.ParseUint(f[1], 10, 64)
			x.spec.cpuQuota, _ = strconv.ParseUint(f[0], 10, 64) // "max": 0
			x.spec.hasCPU = true
		}
	}
	if w, ok := readUintOK(filepath.Join(d, "cpu.weight")); ok && w > 0 {
		// The inverse of the shares → weight conversion of runc and systemd.
		x.spec.cpuShares = 2 + (w-1)*262142/9999
	}
	if st, err := readKV(filepath.Join(d, "memory.stat")); err == nil {
		x.mappedFile = st["file_mapped"]
		if k, ok := st["kernel"]; ok { // since Linux 5.18
			x.kernel, x.hasKernel = k, true
		} else {
			x.kernel, x.hasKernel = st["kernel_stack"]+st["slab"]+st["sock"]+st["percpu"], true
		}
	}
	x.swap, _ = readUintOK(filepath.Join(d, "memory.swap.current"))
	x.maxUsage, x.hasMaxUsage = readUintOK(filepath.Join(d, "memory.peak")) // since Linux 5.19
	if ev, err := readKV(filepath.Join(d, "memory.events")); err == nil {
		x.failcnt, x.hasFailcnt = ev["max"], true
		x.oomKills, x.hasOOM = ev["oom_kill"], true
	}
	if l, err := readMax(filepath.Join(d, "memory.max")); err == nil {
		x.spec.hasMem = true
		x.spec.memLimit = l
		x.spec.memSwapLimit, _ = readMax(filepath.Join(d, "memory.swap.max"))
		x.spec.memReservation, _ = readMax(filepath.Join(d, "memory.low"))
	}
	x.blkio, x.hasBlkio = readIOStatV2(filepath.Join(d, "io.stat"))
}

// limitOrZero maps a cgroup v1 "no limit" (about 2^63) to 0.
func limitOrZero(v uint64) uint64 {
	if v >= unlimited {
		return 0
	}
	return v
}

func readUintOK(path string) (uint64, bool) {
	v, err := readUint(path)
	return v, err == nil
}

// readInt reads a file holding one signed number; a negative one (v1's
// -1 for "none") reads as 0.
func readInt(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, err
	}
	return uint64(n), nil
}

// readMax reads a cgroup v2 (or pids.max) limit: "max" is 0.
func readMax(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseUint(s, 10, 64)
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

// readBlkioV1 reads blkio.throttle.io_service_bytes and io_serviced (the
// throttle files count every I/O with any scheduler; the older
// io_service_bytes_recursive only with CFQ/BFQ, so they are read when the
// throttle ones list no device).
func readBlkioV1(dir string) ([]blkioStat, bool) {
	byDev := map[[2]uint64]*blkioStat{}
	var order [][2]uint64
	read := func(name string, bytes bool) bool {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return false
		}
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			// "8:0 Read 4096"
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			maj, min, ok := parseDev(f[0])
			v, err := strconv.ParseUint(f[2], 10, 64)
			if !ok || err != nil {
				continue
			}
			k := [2]uint64{maj, min}
			s := byDev[k]
			if s == nil {
				s = &blkioStat{major: maj, minor: min}
				byDev[k] = s
				order = append(order, k)
			}
			found = true
			switch {
			case bytes && f[1] == "Read":
				s.readBytes, s.hasBytes = v, true
			case bytes && f[1] == "Write":
				s.writeBytes, s.hasBytes = v, true
			case !bytes && f[1] == "Read":
				s.reads, s.hasServiced = v, true
			case !bytes && f[1] == "Write":
				s.writes, s.hasServiced = v, true
			}
		}
		return found
	}
	ok := read("blkio.throttle.io_service_bytes", true)
	read("blkio.throttle.io_serviced", false)
	if len(order) == 0 {
		ok = read("blkio.io_service_bytes_recursive", true)
		read("blkio.io_serviced_recursive", false)
	}
	out := make([]blkioStat, 0, len(order))
	for _, k := range order {
		out = append(out, *byDev[k])
	}
	return out, ok || len(out) > 0
}

// readIOStatV2 reads io.stat: "8:0 rbytes=1 wbytes=2 rios=3 wios=4 ...".
func readIOStatV2(path string) ([]blkioStat, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	var out []blkioStat
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		maj, min, ok := parseDev(f[0])
		if !ok {
			continue
		}
		s := blkioStat{major: maj, minor: min, hasBytes: true, hasServiced: true}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseUint(v, 10, 64)
			switch k {
			case "rbytes":
				s.readBytes = n
			case "wbytes":
				s.writeBytes = n
			case "rios":
				s.reads = n
			case "wios":
				s.writes = n
			}
		}
		out = append(out, s)
	}
	return out, true
}

func parseDev(s string) (maj, min uint64, ok bool) {
	a, b, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	var err1, err2 error
	maj, err1 = strconv.ParseUint(a, 10, 64)
	min, err2 = strconv.ParseUint(b, 10, 64)
	return maj, min, err1 == nil && err2 == nil
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
