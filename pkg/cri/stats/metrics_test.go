package stats

import (
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The metrics built from samples.

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
