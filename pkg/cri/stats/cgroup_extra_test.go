package stats

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The metrics-only figures (cgroupExtra) from fake /proc, /sys and cgroup
// trees.

// fakeFDs gives process pid the open files fds: "socket:[N]" is a socket.
func fakeFDs(t *testing.T, root string, pid string, fds ...string) {
	t.Helper()
	dir := filepath.Join(root, "proc", pid, "fd")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, target := range fds {
		if err := os.Symlink(target, filepath.Join(dir, strings.Repeat("1", i+1))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatsExtraV1(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "cg")
	// cpu and cpuacct apart (as on this project's CI machine), blkio.
	mountinfo := strings.Join([]string{
		"32 31 0:29 / " + cg + "/cpu rw - cgroup cgroup rw,cpu",
		"33 31 0:30 / " + cg + "/cpuacct rw - cgroup cgroup rw,cpuacct",
		"35 31 0:32 / " + cg + "/memory rw - cgroup cgroup rw,memory",
		"38 31 0:35 / " + cg + "/blkio rw - cgroup cgroup rw,blkio",
		"39 31 0:36 / " + cg + "/pids rw - cgroup cgroup rw,pids",
	}, "\n") + "\n"
	dir := "/docker/" + statsTestID
	writeFiles(t, root, map[string]string{
		"proc/self/mountinfo": mountinfo,
		"proc/42/cgroup": "9:name=systemd:" + dir + "\n8:pids:" + dir + "\n6:blkio:" + dir + "\n4:memory:" + dir +
			"\n2:cpuacct:" + dir + "\n1:cpu:" + dir + "\n",
		"sys/dev/block/8:0/uevent":                            "MAJOR=8\nMINOR=0\nDEVNAME=sda\nDEVTYPE=disk\n",
		"cg/cpuacct" + dir + "/cpuacct.usage":                 "3000000000\n",
		"cg/cpuacct" + dir + "/cpuacct.stat":                  "user 250\nsystem 120\n",
		"cg/cpu" + dir + "/cpu.stat":                          "nr_periods 40\nnr_throttled 7\nthrottled_time 3500000000\n",
		"cg/cpu" + dir + "/cpu.cfs_period_us":                 "100000\n",
		"cg/cpu" + dir + "/cpu.cfs_quota_us":                  "20000\n",
		"cg/cpu" + dir + "/cpu.shares":                        "512\n",
		"cg/memory" + dir + "/memory.usage_in_bytes":          "69722112\n",
		"cg/memory" + dir + "/memory.limit_in_bytes":          "67108864\n",
		"cg/memory" + dir + "/memory.stat":                    "total_cache 1732608\ntotal_rss 67411968\ntotal_mapped_file 1159168\ntotal_swap 8192\ntotal_inactive_file 974848\n",
		"cg/memory" + dir + "/memory.kmem.usage_in_bytes":     "167936\n",
		"cg/memory" + dir + "/memory.max_usage_in_bytes":      "70000000\n",
		"cg/memory" + dir + "/memory.failcnt":                 "12\n",
		"cg/memory" + dir + "/memory.oom_control":             "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"cg/memory" + dir + "/memory.memsw.limit_in_bytes":    "134217728\n",
		"cg/memory" + dir + "/memory.soft_limit_in_bytes":     "9223372036854771712\n",
		"cg/pids" + dir + "/pids.current":                     "5\n",
		"cg/pids" + dir + "/pids.max":                         "max\n",
		"cg/pids" + dir + "/cgroup.procs":                     "42\n43\n",
		"cg/blkio" + dir + "/blkio.throttle.io_service_bytes": "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Async 12288\n8:0 Total 12288\n7:1 Read 0\n7:1 Write 512\nTotal 12800\n",
		"cg/blkio" + dir + "/blkio.throttle.io_serviced":      "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\n7:1 Write 1\nTotal 4\n",
	})
	// The files a v1 kernel has beside those the figures come from.
	writeFiles(t, cg, map[string]string{
		"cpuacct" + dir + "/cpuacct.usage_percpu":           "1000000000 2000000000\n",
		"memory" + dir + "/memory.use_hierarchy":            "1\n",
		"memory" + dir + "/memory.memsw.usage_in_bytes":     "69730304\n",
		"memory" + dir + "/memory.memsw.max_usage_in_bytes": "70008192\n",
		"memory" + dir + "/memory.memsw.failcnt":            "0\n",
		"memory" + dir + "/memory.kmem.max_usage_in_bytes":  "200000\n",
		"memory" + dir + "/memory.kmem.failcnt":             "0\n",
	})
	fakeFDs(t, root, "42", "/dev/null", "socket:[1234]", "pipe:[99]")
	fakeFDs(t, root, "43", "socket:[1235]")
	fs, err := loadCgroupFS(filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.paths(42, statsTestID)
	if err != nil {
		t.Fatal(err)
	}
	if p.cpuCtl != filepath.Join(cg, "cpu", dir) || p.blkio != filepath.Join(cg, "blkio", dir) {
		t.Fatalf("paths %+v", p)
	}
	x, err := p.readExtra(filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	want := &cgroupExtra{
		cpuUser: 2.5e9, cpuSystem: 1.2e9, hasCPUSplit: true,
		cfsPeriods: 40, cfsThrottled: 7, cfsThrottledNanos: 3.5e9, hasCFS: true,
		mappedFile: 1159168, swap: 8192, kernel: 167936, hasKernel: true, maxUsage: 70000000, hasMaxUsage: true,
		failcnt: 12, hasFailcnt: true, oomKills: 2, hasOOM: true,
		threads: 5, threadsMax: 0, hasThreads: true,
		procs: 2, fds: 4, sockets: 2, hasProcs: true,
		spec: cgroupSpec{cpuPeriod: 100000, cpuQuota: 20000, cpuShares: 512, hasCPU: true,
			memLimit: 67108864, memSwapLimit: 134217728, memReservation: 0, hasMem: true},
		// In device order.
		blkio: []blkioStat{
			{major: 7, minor: 1, writeBytes: 512, writes: 1, hasBytes: true, hasServiced: true},
			{major: 8, minor: 0, readBytes: 4096, writeBytes: 8192, reads: 1, writes: 2, hasBytes: true, hasServiced: true},
		},
		hasBlkio:   true,
		blkioNames: []string{"7:1", "/dev/sda"},
	}
	if !extraEqual(x, want) {
		t.Errorf("extra\n got %+v\nwant %+v", *x, *want)
	}
	// A cgroup whose processes are gone (the container just exited).
	if err := os.Remove(filepath.Join(cg, "pids", dir, "cgroup.procs")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.readExtra(filepath.Join(root, "proc")); err == nil {
		t.Error("no error without cgroup.procs")
	}
}

func TestStatsExtraV2(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "cg")
	dir := "/system.slice/docker-" + statsTestID + ".scope"
	writeFiles(t, root, map[string]string{
		"proc/self/mountinfo":    "30 23 0:26 / " + cg + " rw - cgroup2 cgroup2 rw,nsdelegate\n",
		"proc/7/cgroup":          "0::" + dir + "\n",
		"cg" + dir + "/cpu.stat": "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 10\nnr_throttled 3\nthrottled_usec 1500000\n",
		"cg" + dir + "/cpu.max":  "20000 100000\n",
		// runc maps shares 1024 to weight 39.
		"cg" + dir + "/cpu.weight":          "39\n",
		"cg" + dir + "/memory.current":      "1000000\n",
		"cg" + dir + "/memory.max":          "67108864\n",
		"cg" + dir + "/memory.swap.max":     "max\n",
		"cg" + dir + "/memory.low":          "0\n",
		"cg" + dir + "/memory.stat":         "anon 600000\nfile 300000\nkernel 90000\nfile_mapped 4096\ninactive_file 100000\n",
		"cg" + dir + "/memory.swap.current": "0\n",
		"cg" + dir + "/memory.events":       "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
		"cg" + dir + "/pids.current":        "3\n",
		"cg" + dir + "/pids.max":            "4096\n",
		"cg" + dir + "/cgroup.procs":        "7\n",
		"cg" + dir + "/io.stat":             "8:16 rbytes=1024 wbytes=2048 rios=1 wios=2 dbytes=0 dios=0\n",
	})
	fakeFDs(t, root, "7", "socket:[1]", "/dev/null")
	fs, err := loadCgroupFS(filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.paths(7, statsTestID)
	if err != nil {
		t.Fatal(err)
	}
	x, err := p.readExtra(filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	want := &cgroupExtra{
		cpuUser: 2e9, cpuSystem: 5e8, hasCPUSplit: true,
		cfsPeriods: 10, cfsThrottled: 3, cfsThrottledNanos: 1.5e9, hasCFS: true,
		mappedFile: 4096, kernel: 90000, hasKernel: true,
		failcnt: 4, hasFailcnt: true, oomKills: 1, hasOOM: true,
		threads: 3, threadsMax: 4096, hasThreads: true,
		procs: 1, fds: 2, sockets: 1, hasProcs: true,
		spec: cgroupSpec{cpuPeriod: 100000, cpuQuota: 20000, cpuShares: 2 + 38*262142/9999, hasCPU: true,
			memLimit: 67108864, hasMem: true},
		blkio:      []blkioStat{{major: 8, minor: 16, readBytes: 1024, writeBytes: 2048, reads: 1, writes: 2, hasBytes: true, hasServiced: true}},
		hasBlkio:   true,
		blkioNames: []string{"8:16"},
	}
	if !extraEqual(x, want) {
		t.Errorf("extra\n got %+v\nwant %+v", *x, *want)
	}
	if x.spec.cpuShares < 990 || x.spec.cpuShares > 1024 {
		t.Errorf("weight 39 read as %d shares, want about 1024 (998: the conversion rounds)", x.spec.cpuShares)
	}
}

func extraEqual(a, b *cgroupExtra) bool {
	return reflect.DeepEqual(a, b)
}
