package cri

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The metrics-only figures (cgroupExtra) from fake /proc, /sys and cgroup
// trees, and the metrics built from them.

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
		blkio: []blkioStat{
			{major: 8, minor: 0, readBytes: 4096, writeBytes: 8192, reads: 1, writes: 2, hasBytes: true, hasServiced: true},
			{major: 7, minor: 1, writeBytes: 512, writes: 1, hasBytes: true, hasServiced: true},
		},
		hasBlkio:   true,
		blkioNames: []string{"/dev/sda", "7:1"},
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

// TestMetricsMatchDescriptors builds the metrics of a pod and of a
// container with every figure known, and checks each against
// ListMetricDescriptors: described, with as many label values as the
// descriptor has keys; and that every metric critest (cri-tools v1.37)
// expects is there but those cAdvisor has and cri-compose does not
// (hugetlb, pressure, ulimits).
func TestMetricsMatchDescriptors(t *testing.T) {
	desc := map[string]*runtime.MetricDescriptor{}
	for _, d := range metricDescriptors {
		if _, dup := desc[d.Name]; dup {
			t.Errorf("descriptor %s twice", d.Name)
		}
		if d.Help == "" || len(d.LabelKeys) == 0 {
			t.Errorf("descriptor %s: no help or no labels", d.Name)
		}
		desc[d.Name] = d
	}
	s := usageSample{at: 5e9, cpu: 3e9, hasProcs: true, procs: 4,
		mem:    memUsage{usage: 10, workingSet: 8, rss: 5, cache: 3, pgfault: 2, pgmajfault: 1, limit: 64 << 20},
		net:    []ifaceUsage{{name: "eth0", rxBytes: 1, txBytes: 2}},
		hasNet: true,
		ext: &cgroupExtra{cpuUser: 2e9, cpuSystem: 1e9, hasCPUSplit: true, hasCFS: true, cfsPeriods: 9,
			hasKernel: true, hasMaxUsage: true, hasFailcnt: true, hasOOM: true, hasThreads: true, threads: 6,
			procs: 2, fds: 7, sockets: 1, hasProcs: true,
			spec:  cgroupSpec{cpuPeriod: 100000, cpuQuota: 20000, cpuShares: 1024, hasCPU: true, memLimit: 64 << 20, hasMem: true},
			blkio: []blkioStat{{major: 8, minor: 0, readBytes: 1, hasBytes: true, hasServiced: true}}, hasBlkio: true,
			blkioNames: []string{"/dev/sda"}},
	}
	m := &metricSet{labels: []string{"pod", "ns", "ctr", "id", "image"}}
	m.usage(s)
	m.extra(s.ext)
	m.capacity(fsCapacity{mount: "/var/lib/docker/overlay2", bytes: 100, inodes: 10, inodesFree: 5})
	m.add(mLastSeen, gauge, 5)
	m.add(mStartTime, gauge, 1)
	m.add(mFsUsage, gauge, 4096, "/var/lib/docker/overlay2")
	for _, i := range s.net {
		m.add(mNetRxBytes, counter, i.rxBytes, i.name)
		m.add(mNetRxPackets, counter, i.rxPackets, i.name)
		m.add(mNetRxErrors, counter, i.rxErrors, i.name)
		m.add(mNetRxDropped, counter, i.rxDropped, i.name)
		m.add(mNetTxBytes, counter, i.txBytes, i.name)
		m.add(mNetTxPackets, counter, i.txPackets, i.name)
		m.add(mNetTxErrors, counter, i.txErrors, i.name)
		m.add(mNetTxDropped, counter, i.txDropped, i.name)
	}
	got := map[string]bool{}
	for _, mt := range m.out {
		d, ok := desc[mt.Name]
		if !ok {
			t.Errorf("metric %s has no descriptor", mt.Name)
			continue
		}
		if len(mt.LabelValues) != len(d.LabelKeys) {
			t.Errorf("metric %s: %d label values for %d keys %v", mt.Name, len(mt.LabelValues), len(d.LabelKeys), d.LabelKeys)
		}
		got[mt.Name] = true
	}
	if m.oomFromEvents {
		t.Error("OOM count taken from events although the cgroup has it")
	}
	// cri-tools v1.37.0 pkg/validate/pod.go expectedMetricDescriptorNames,
	// less unimplementedMetricDescriptors.
	expected := []string{
		"container_blkio_device_usage_total", "container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total",
		"container_cpu_cfs_throttled_seconds_total", "container_cpu_system_seconds_total", "container_cpu_usage_seconds_total",
		"container_cpu_user_seconds_total", "container_file_descriptors", "container_fs_inodes_free", "container_fs_inodes_total",
		"container_fs_limit_bytes", "container_fs_reads_bytes_total", "container_fs_reads_total", "container_fs_usage_bytes",
		"container_fs_writes_bytes_total", "container_fs_writes_total", "container_last_seen", "container_memory_cache",
		"container_memory_failcnt", "container_memory_failures_total", "container_memory_kernel_usage",
		"container_memory_mapped_file", "container_memory_max_usage_bytes", "container_memory_rss", "container_memory_swap",
		"container_memory_usage_bytes", "container_memory_working_set_bytes", "container_network_receive_bytes_total",
		"container_network_receive_errors_total", "container_network_receive_packets_dropped_total",
		"container_network_receive_packets_total", "container_network_transmit_bytes_total",
		"container_network_transmit_errors_total", "container_network_transmit_packets_dropped_total",
		"container_network_transmit_packets_total", "container_oom_events_total", "container_processes", "container_sockets",
		"container_spec_cpu_period", "container_spec_cpu_shares", "container_spec_memory_limit_bytes",
		"container_spec_memory_swap_limit_bytes", "container_start_time_seconds", "container_threads", "container_threads_max",
	}
	for _, name := range expected {
		if desc[name] == nil {
			t.Errorf("no descriptor for %s", name)
		}
		if !got[name] {
			t.Errorf("no metric %s", name)
		}
	}
	// Processes are cgroup.procs' (2), not pids.current's (threads, 4).
	for _, mt := range m.out {
		if mt.Name == mProcesses && mt.Value.Value != 2 {
			t.Errorf("%s = %d, want 2", mProcesses, mt.Value.Value)
		}
		if mt.Name == mCPUUser && mt.Value.Value != 2 {
			t.Errorf("%s = %d, want 2", mCPUUser, mt.Value.Value)
		}
	}
}

func TestMetricsOOMFromEvents(t *testing.T) {
	// A kernel before 4.13 has no oom_kill in memory.oom_control: the
	// count is the engine's "oom" events (ListPodSandboxMetrics adds it).
	m := &metricSet{labels: []string{"p", "n", "c", "i", "im"}}
	m.extra(&cgroupExtra{})
	if !m.oomFromEvents {
		t.Error("no fallback to the engine's OOM events")
	}
	for _, mt := range m.out {
		if mt.Name == mOOMEvents {
			t.Error("an OOM count without one")
		}
	}
}
