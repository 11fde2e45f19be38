package cri_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/test/suite"
)

const (
	// statsBurn keeps one core busy.
	statsBurn = "while :; do :; done"
	// statsHog holds at least 64 MiB of anonymous memory: tail keeps the
	// whole unterminated line, and the pipe never ends.
	statsHog = "(dd if=/dev/zero bs=1M count=64 2>/dev/null; sleep 300) | tail -n 1"
	mib      = 1 << 20
)

// burnMu lets one test at a time burn CPU, so that the tests of this
// package do not starve each other's burners.
var burnMu sync.Mutex

// burning holds burnMu until the test ends.
func burning(t *testing.T) {
	burnMu.Lock()
	t.Cleanup(burnMu.Unlock)
}

func (e *criEnv) ctrStats(id string) *runtime.ContainerStats {
	e.t.Helper()
	resp, err := e.rt().ContainerStats(e.ctx(), &runtime.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		e.t.Fatalf("ContainerStats %.12s: %v", id, err)
	}
	return resp.GetStats()
}

func (e *criEnv) podStats(id string) *runtime.PodSandboxStats {
	e.t.Helper()
	resp, err := e.rt().PodSandboxStats(e.ctx(), &runtime.PodSandboxStatsRequest{PodSandboxId: id})
	if err != nil {
		e.t.Fatalf("PodSandboxStats %.12s: %v", id, err)
	}
	return resp.GetStats()
}

func (e *criEnv) listCtrStats(f *runtime.ContainerStatsFilter) []*runtime.ContainerStats {
	e.t.Helper()
	resp, err := e.rt().ListContainerStats(e.ctx(), &runtime.ListContainerStatsRequest{Filter: f})
	if err != nil {
		e.t.Fatalf("ListContainerStats: %v", err)
	}
	return resp.GetStats()
}

func statIDs(list []*runtime.ContainerStats) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.GetAttributes().GetId())
	}
	sort.Strings(out)
	return out
}

// waitBurning waits until a container's (or pod's) CPU rate, as the stats
// RPC reports it, is above 0.3 cores. When the machine is so busy that the
// burner never gets that much (its cumulative counter says so too), the
// rate must at least agree with the counter.
func waitBurning(e *criEnv, what string, get func() *runtime.CpuUsage) *runtime.CpuUsage {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var cpu *runtime.CpuUsage
	for time.Now().Before(deadline) {
		if cpu = get(); cpu.GetUsageNanoCores().GetValue() > 0.3e9 {
			return cpu
		}
		time.Sleep(200 * time.Millisecond)
	}
	a := get()
	time.Sleep(4 * time.Second)
	b := get()
	dt := b.GetTimestamp() - a.GetTimestamp()
	if dt <= 0 || a.GetUsageNanoCores() == nil || b.GetUsageNanoCores() == nil {
		e.t.Fatalf("%s: no CPU rate: %v then %v", what, a, b)
	}
	counter := float64(b.GetUsageCoreNanoSeconds().GetValue()-a.GetUsageCoreNanoSeconds().GetValue()) * 1e9 / float64(dt)
	rate := float64(b.GetUsageNanoCores().GetValue())
	if counter > 0.3e9 || counter < 0.02e9 || rate < counter/2 || rate > counter*2 {
		e.t.Fatalf("%s: usage_nano_cores %.0f over 20s, against %.0f from the cumulative counter", what, rate, counter)
	}
	e.t.Logf("%s: the machine is busy (the burner gets %.2f cores); usage_nano_cores %.0f agrees with the counter", what, counter/1e9, rate)
	return b
}

// checkCPUGrows checks that the cumulative CPU time keeps growing.
func checkCPUGrows(e *criEnv, what string, first *runtime.CpuUsage, get func() *runtime.CpuUsage) {
	e.t.Helper()
	suite.Eventually(e.t, what+" CPU time growing", 10*time.Second, func() (bool, string) {
		cpu := get()
		return cpu.GetTimestamp() > first.GetTimestamp() &&
				cpu.GetUsageCoreNanoSeconds().GetValue() > first.GetUsageCoreNanoSeconds().GetValue()+2e7,
			fmt.Sprintf("%v then %v", first, cpu)
	})
}

// checkHog checks a container's memory as statsHog makes it.
func checkHog(e *criEnv, get func() *runtime.MemoryUsage) {
	e.t.Helper()
	var mem *runtime.MemoryUsage
	// tail holds the 64 MiB line as it reads it: the working set can pass
	// 60 MiB (it counts kernel memory too) while the RSS still grows, so
	// wait for both.
	suite.Eventually(e.t, "working set and rss > 60 MiB", 20*time.Second, func() (bool, string) {
		mem = get()
		return mem.GetWorkingSetBytes().GetValue() > 60*mib && mem.GetRssBytes().GetValue() >= 60*mib, fmt.Sprint(mem)
	})
	if mem.GetUsageBytes().GetValue() < mem.GetWorkingSetBytes().GetValue() {
		e.t.Errorf("usage %d < working set %d", mem.GetUsageBytes().GetValue(), mem.GetWorkingSetBytes().GetValue())
	}
	if mem.GetRssBytes().GetValue() < 60*mib || mem.GetPageFaults().GetValue() == 0 {
		e.t.Errorf("rss %d, page faults %d", mem.GetRssBytes().GetValue(), mem.GetPageFaults().GetValue())
	}
	if mem.GetAvailableBytes() != nil {
		e.t.Errorf("available_bytes %d without a limit", mem.GetAvailableBytes().GetValue())
	}
	if mem.GetTimestamp() == 0 || time.Since(time.Unix(0, mem.GetTimestamp())) > 10*time.Second {
		e.t.Errorf("memory sample time %v", time.Unix(0, mem.GetTimestamp()))
	}
}

// TestContainerStats reads the cgroups of a container burning CPU, one
// holding memory and one with a memory limit, checks the writable layer and
// ListContainerStats' filters.
func TestContainerStats(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	burning(t)
	cri.SetLayerMaxAge(e.server().Srv, time.Second)
	pod := e.podConfig("stats")
	podID := e.runPod(pod)
	burner := e.runCtr(podID, pod, ctrConfig("burner", statsBurn))
	hog := e.runCtr(podID, pod, ctrConfig("hog", statsHog))
	limitedCfg := ctrConfig("limited", "dd if=/dev/zero of=/layer.bin bs=1M count=8 2>/dev/null; sleep 300")
	limitedCfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: 128 * mib}}
	limited := e.runCtr(podID, pod, limitedCfg)
	done := e.runCtr(podID, pod, ctrConfig("done", "exit 0"))

	get := func() *runtime.CpuUsage { return e.ctrStats(burner).GetCpu() }
	first := waitBurning(e, "burner", get)
	checkCPUGrows(e, "burner", first, get)
	checkHog(e, func() *runtime.MemoryUsage { return e.ctrStats(hog).GetMemory() })

	var ls *runtime.ContainerStats
	suite.Eventually(t, "limited: writable layer >= 8 MiB and available memory", 20*time.Second, func() (bool, string) {
		ls = e.ctrStats(limited)
		return ls.GetWritableLayer().GetUsedBytes().GetValue() >= 8*mib && ls.GetMemory().GetAvailableBytes() != nil, fmt.Sprint(ls)
	})
	mem := ls.GetMemory()
	if got, want := mem.GetAvailableBytes().GetValue(), 128*mib-mem.GetWorkingSetBytes().GetValue(); got != want {
		t.Errorf("available %d, want limit - working set = %d", got, want)
	}
	wl := ls.GetWritableLayer()
	if wl.GetFsId().GetMountpoint() == "" || wl.GetInodesUsed().GetValue() == 0 || wl.GetTimestamp() == 0 {
		t.Errorf("writable layer %v", wl)
	}
	if a := ls.GetAttributes(); a.GetId() != limited || a.GetMetadata().GetName() != "limited" || a.GetLabels()["ctr"] != "limited" ||
		a.GetAnnotations()["cri-compose.test/ctr"] != "limited" {
		t.Errorf("attributes %v", a)
	}

	e.waitCtrState(done, runtime.ContainerState_CONTAINER_EXITED, 10*time.Second)
	if ds := e.ctrStats(done); ds.GetCpu() != nil || ds.GetMemory() != nil || ds.GetAttributes().GetId() != done {
		t.Errorf("an exited container has usage: %v", ds)
	}

	all := []string{burner, hog, limited, done}
	sort.Strings(all)
	for _, tc := range []struct {
		name string
		f    *runtime.ContainerStatsFilter
		want []string
	}{
		{"pod", &runtime.ContainerStatsFilter{PodSandboxId: podID}, all},
		{"pod prefix", &runtime.ContainerStatsFilter{PodSandboxId: podID[:12]}, all},
		{"id", &runtime.ContainerStatsFilter{Id: burner}, []string{burner}},
		{"id prefix", &runtime.ContainerStatsFilter{Id: hog[:12]}, []string{hog}},
		{"label", &runtime.ContainerStatsFilter{PodSandboxId: podID, LabelSelector: map[string]string{"ctr": "hog"}}, []string{hog}},
		{"label and id", &runtime.ContainerStatsFilter{Id: burner, LabelSelector: map[string]string{"ctr": "hog"}}, nil},
		{"other pod", &runtime.ContainerStatsFilter{Id: burner, PodSandboxId: "0000"}, nil},
	} {
		if got := statIDs(e.listCtrStats(tc.f)); !slices.Equal(got, tc.want) {
			t.Errorf("ListContainerStats %s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	_, err := e.rt().ContainerStats(e.ctx(), &runtime.ContainerStatsRequest{ContainerId: "0000000000000000"})
	wantCode(t, err, codes.NotFound)
}

// sendUDP sends n bytes to ip:9 (discard) from this process, through the
// engine's bridge. The socket is unconnected, so that the pod's ICMP
// replies cannot fail the writes.
func sendUDP(t *testing.T, ip string, n int) {
	t.Helper()
	c, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	to := &net.UDPAddr{IP: net.ParseIP(ip), Port: 9}
	buf := make([]byte, 1000)
	for sent := 0; sent < n; sent += len(buf) {
		if _, err := c.WriteTo(buf, to); err != nil {
			t.Fatalf("send to %s: %v", to, err)
		}
	}
}

func rxBytes(n *runtime.NetworkUsage) uint64 { return n.GetDefaultInterface().GetRxBytes().GetValue() }

// TestPodSandboxStats: a pod's CPU, memory, processes and network (after
// traffic sent to its IP), and ListPodSandboxStats' filters.
func TestPodSandboxStats(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	burning(t)
	pod := e.podConfig("podstats")
	podID := e.runPod(pod)
	burner := e.runCtr(podID, pod, ctrConfig("burner", statsBurn))
	quiet := e.runCtr(podID, pod, ctrConfig("quiet", "sleep 300"))

	get := func() *runtime.CpuUsage { return e.podStats(podID).GetLinux().GetCpu() }
	first := waitBurning(e, "pod", get)
	checkCPUGrows(e, "pod", first, get)

	st := e.podStats(podID)
	lx := st.GetLinux()
	if a := st.GetAttributes(); a.GetId() != podID || a.GetMetadata().GetUid() != pod.GetMetadata().GetUid() || a.GetLabels()["test"] != "podstats" {
		t.Errorf("attributes %v", a)
	}
	if got := statIDs(lx.GetContainers()); !slices.Equal(got, sortedStrings(burner, quiet)) {
		t.Errorf("containers %v, want %v", got, sortedStrings(burner, quiet))
	}
	if lx.GetMemory().GetWorkingSetBytes().GetValue() == 0 {
		t.Errorf("pod memory %v", lx.GetMemory())
	}
	if n := lx.GetProcess().GetProcessCount().GetValue(); n < 3 {
		t.Errorf("process count %d, want at least pause + 2", n) // with a pids controller
	}
	if lx.GetNetwork().GetDefaultInterface().GetName() != "eth0" {
		t.Fatalf("network %v", lx.GetNetwork())
	}

	ip := e.podStatus(podID).GetNetwork().GetIp()
	before := rxBytes(lx.GetNetwork())
	const sent = 200_000
	sendUDP(t, ip, sent)
	suite.Eventually(t, "rx bytes after traffic", 10*time.Second, func() (bool, string) {
		n := e.podStats(podID).GetLinux().GetNetwork()
		return rxBytes(n) >= before+sent, fmt.Sprintf("before %d, now %v", before, n)
	})

	other := e.podConfig("podstats-other")
	otherID := e.runPod(other)
	ids := func(f *runtime.PodSandboxStatsFilter) []string {
		resp, err := e.rt().ListPodSandboxStats(e.ctx(), &runtime.ListPodSandboxStatsRequest{Filter: f})
		if err != nil {
			t.Fatalf("ListPodSandboxStats: %v", err)
		}
		var out []string
		for _, s := range resp.GetStats() {
			if s.GetAttributes().GetId() == podID || s.GetAttributes().GetId() == otherID {
				out = append(out, s.GetAttributes().GetId())
			}
		}
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		name string
		f    *runtime.PodSandboxStatsFilter
		want []string
	}{
		{"all", nil, sortedStrings(podID, otherID)},
		{"id", &runtime.PodSandboxStatsFilter{Id: otherID}, []string{otherID}},
		{"id prefix", &runtime.PodSandboxStatsFilter{Id: podID[:12]}, []string{podID}},
		{"label", &runtime.PodSandboxStatsFilter{LabelSelector: map[string]string{"test": "podstats"}}, []string{podID}},
		{"label mismatch", &runtime.PodSandboxStatsFilter{Id: podID, LabelSelector: map[string]string{"test": "podstats-other"}}, nil},
	} {
		if got := ids(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("ListPodSandboxStats %s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	_, err := e.rt().PodSandboxStats(e.ctx(), &runtime.PodSandboxStatsRequest{PodSandboxId: "0000000000000000"})
	wantCode(t, err, codes.NotFound)
}

func sortedStrings(s ...string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

// TestPodSandboxStatsCgroupParent: with a cgroup parent (as kubelet always
// gives), the pod's figures are its own cgroup's.
func TestPodSandboxStatsCgroupParent(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	burning(t)
	info, err := e.d.Info(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if info.CgroupDriver != "cgroupfs" {
		t.Skipf("the engine's cgroup driver is %s; this test makes cgroupfs parents", info.CgroupDriver)
	}
	parent := "/cri-compose-test-" + randHex(4)
	t.Cleanup(func() { removeCgroupDirs(t, parent) }) // after the pod's own cleanup
	pod := e.podConfig("cgparent")
	pod.Linux = &runtime.LinuxPodSandboxConfig{CgroupParent: parent}
	podID := e.runPod(pod)
	e.runCtr(podID, pod, ctrConfig("burner", statsBurn))
	hog := e.runCtr(podID, pod, ctrConfig("hog", statsHog))
	get := func() *runtime.CpuUsage { return e.podStats(podID).GetLinux().GetCpu() }
	first := waitBurning(e, "pod", get)
	checkCPUGrows(e, "pod", first, get)
	checkHog(e, func() *runtime.MemoryUsage { return e.podStats(podID).GetLinux().GetMemory() })
	if e.podStats(podID).GetLinux().GetMemory().GetUsageBytes().GetValue() < e.ctrStats(hog).GetMemory().GetUsageBytes().GetValue() {
		t.Error("the pod uses less memory than one of its containers")
	}
}

// removeCgroupDirs removes the cgroup directories named parent that the
// engine made in every hierarchy.
func removeCgroupDirs(t *testing.T, parent string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + parent)
	if d := "/sys/fs/cgroup" + parent; len(dirs) == 0 {
		dirs = []string{d}
	}
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			t.Logf("cleanup: %v", err)
		}
	}
}

// TestContainerStatsFromEngine: with cgroups out of reach (a remote engine),
// the same figures come from one engine stats stream per container and the
// writable layer from the engine's sizes.
func TestContainerStatsFromEngine(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	burning(t)
	cri.StatsFromEngine(e.server().Srv)
	cri.SetLayerMaxAge(e.server().Srv, time.Second)
	pod := e.podConfig("enginestats")
	podID := e.runPod(pod)
	burner := e.runCtr(podID, pod, ctrConfig("burner", statsBurn))
	hog := e.runCtr(podID, pod, ctrConfig("hog", statsHog))
	writer := e.runCtr(podID, pod, ctrConfig("writer", "dd if=/dev/zero of=/layer.bin bs=1M count=8 2>/dev/null; sleep 300"))

	get := func() *runtime.CpuUsage { return e.ctrStats(burner).GetCpu() }
	first := waitBurning(e, "burner", get)
	checkCPUGrows(e, "burner", first, get)
	checkHog(e, func() *runtime.MemoryUsage { return e.ctrStats(hog).GetMemory() })
	suite.Eventually(t, "writable layer >= 8 MiB from the engine", 30*time.Second, func() (bool, string) {
		wl := e.ctrStats(writer).GetWritableLayer()
		return wl.GetUsedBytes().GetValue() >= 8*mib && wl.GetInodesUsed() == nil, fmt.Sprint(wl)
	})
	// The engine counts no inodes: no descriptor promises them.
	dresp, err := e.rt().ListMetricDescriptors(e.ctx(), &runtime.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatalf("ListMetricDescriptors: %v", err)
	}
	fsUsage := false
	for _, d := range dresp.GetDescriptors() {
		switch d.GetName() {
		case "container_fs_inodes_used":
			t.Errorf("container_fs_inodes_used is described, but layers measured by the engine have no inode count")
		case "container_fs_usage_bytes":
			fsUsage = true
		}
	}
	if !fsUsage {
		t.Errorf("container_fs_usage_bytes is not described")
	}
	suite.Eventually(t, "pod network from the engine", 10*time.Second, func() (bool, string) {
		n := e.podStats(podID).GetLinux().GetNetwork()
		return n.GetDefaultInterface().GetName() == "eth0" && n.GetTimestamp() > 0, fmt.Sprint(n)
	})
}

// TestPodSandboxMetrics: the descriptors and the cAdvisor-named metrics of a
// pod burning CPU.
func TestPodSandboxMetrics(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	burning(t)
	dresp, err := e.rt().ListMetricDescriptors(e.ctx(), &runtime.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatalf("ListMetricDescriptors: %v", err)
	}
	keys := map[string][]string{}
	for _, d := range dresp.GetDescriptors() {
		keys[d.GetName()] = d.GetLabelKeys()
	}
	for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
		"container_memory_usage_bytes", "container_memory_rss", "container_network_receive_bytes_total",
		"container_network_transmit_bytes_total"} {
		if _, ok := keys[name]; !ok {
			t.Errorf("no descriptor for %s", name)
		}
	}

	pod := e.podConfig("metrics")
	podID := e.runPod(pod)
	burner := e.runCtr(podID, pod, ctrConfig("burner", statsBurn))
	find := func(ms []*runtime.Metric, name string) *runtime.Metric {
		for _, m := range ms {
			if m.GetName() == name {
				return m
			}
		}
		return nil
	}
	var pm *runtime.PodSandboxMetrics
	var cm *runtime.ContainerMetrics
	suite.Eventually(t, "a whole CPU second in the metrics", 20*time.Second, func() (bool, string) {
		resp, err := e.rt().ListPodSandboxMetrics(e.ctx(), &runtime.ListPodSandboxMetricsRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range resp.GetPodMetrics() {
			if p.GetPodSandboxId() == podID {
				pm = p
			}
		}
		cm = nil
		for _, c := range pm.GetContainerMetrics() {
			if c.GetContainerId() == burner {
				cm = c
			}
		}
		m := find(cm.GetMetrics(), "container_cpu_usage_seconds_total")
		return m.GetValue().GetValue() >= 1, fmt.Sprint(m)
	})
	// A described writable-layer metric comes for a running container
	// (critest checks that every descriptor has its metric).
	for _, name := range []string{"container_fs_usage_bytes", "container_fs_inodes_used"} {
		if _, described := keys[name]; described && find(cm.GetMetrics(), name) == nil {
			t.Errorf("%s is described but the container has none", name)
		}
	}
	for _, m := range append(slices.Clone(pm.GetMetrics()), cm.GetMetrics()...) {
		k, ok := keys[m.GetName()]
		if !ok {
			t.Errorf("metric %s has no descriptor", m.GetName())
		} else if len(k) != len(m.GetLabelValues()) {
			t.Errorf("metric %s: %d label values for keys %v", m.GetName(), len(m.GetLabelValues()), k)
		}
	}
	md := pod.GetMetadata()
	cpu := find(cm.GetMetrics(), "container_cpu_usage_seconds_total")
	if want := []string{md.GetName(), md.GetNamespace(), "burner", burner, testImage}; !slices.Equal(cpu.GetLabelValues(), want) {
		t.Errorf("cpu labels %v, want %v", cpu.GetLabelValues(), want)
	}
	if cpu.GetMetricType() != runtime.MetricType_COUNTER {
		t.Errorf("cpu is a %s", cpu.GetMetricType())
	}
	if ws := find(cm.GetMetrics(), "container_memory_working_set_bytes"); ws.GetValue().GetValue() == 0 || ws.GetMetricType() != runtime.MetricType_GAUGE {
		t.Errorf("working set %v", ws)
	}
	rx := find(pm.GetMetrics(), "container_network_receive_bytes_total")
	if want := []string{md.GetName(), md.GetNamespace(), "", podID, "", "eth0"}; !slices.Equal(rx.GetLabelValues(), want) {
		t.Errorf("pod network labels %v, want %v", rx.GetLabelValues(), want)
	}
	// The metrics-only figures, read from the cgroup of a burner that
	// runs sh (one process, one thread, its standard streams open).
	for name, ok := range map[string]func(uint64) bool{
		// Whole seconds, from ticks: the burner's second may still read 0.
		"container_cpu_user_seconds_total": func(v uint64) bool { return v <= cpu.GetValue().GetValue()+1 },
		"container_processes":              func(v uint64) bool { return v == 1 },
		"container_threads":                func(v uint64) bool { return v == 1 },
		"container_file_descriptors":       func(v uint64) bool { return v >= 3 },
		"container_spec_cpu_shares":        func(v uint64) bool { return v == 1024 || v == 2 },
		"container_spec_cpu_period":        func(v uint64) bool { return v == 100000 },
		"container_memory_max_usage_bytes": func(v uint64) bool { return v > 0 },
		"container_fs_limit_bytes":         func(v uint64) bool { return v > 0 },
		"container_start_time_seconds":     func(v uint64) bool { return v > 0 },
	} {
		m := find(cm.GetMetrics(), name)
		if m == nil || !ok(m.GetValue().GetValue()) {
			t.Errorf("%s: %v", name, m)
		}
	}
}

// TestStatsRightAfterStart: a container started after the sampler's last
// pass has CPU and memory in its first stats (sampled on the spot).
func TestStatsRightAfterStart(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("statsnow")
	podID := e.runPod(pod)
	e.ctrStats(e.runCtr(podID, pod, ctrConfig("first", "sleep 300"))) // the sampler is awake
	for i := range 3 {
		id := e.runCtr(podID, pod, ctrConfig(fmt.Sprintf("c%d", i), "sleep 300"))
		st := e.ctrStats(id)
		if st.GetCpu().GetTimestamp() == 0 || st.GetMemory().GetTimestamp() == 0 {
			t.Errorf("container %d: stats right after the start have no CPU or memory: %v", i, st)
		}
	}
}

// statsFleet runs pods × perPod sleeping containers and waits until every
// one has a CPU sample. It uses only the RuntimeService client, so that the
// benchmark can use it too.
func statsFleet(tb testing.TB, rt runtime.RuntimeServiceClient, podConfig func(string) *runtime.PodSandboxConfig, pods, perPod int) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var ids []string
	errs := make(chan error, pods)
	var wg sync.WaitGroup
	for p := range pods {
		cfg := podConfig(fmt.Sprintf("fleet%d", p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: cfg})
			if err != nil {
				errs <- err
				return
			}
			for c := range perPod {
				cc := ctrConfig(fmt.Sprintf("c%d", c), "sleep 600")
				cr, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: r.GetPodSandboxId(), Config: cc, SandboxConfig: cfg})
				if err == nil {
					_, err = rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: cr.GetContainerId()})
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids = append(ids, cr.GetContainerId())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatalf("fleet: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := rt.ListContainerStats(ctx, &runtime.ListContainerStatsRequest{})
		if err != nil {
			tb.Fatal(err)
		}
		n := 0
		for _, s := range resp.GetStats() {
			if slices.Contains(ids, s.GetAttributes().GetId()) && s.GetCpu() != nil {
				n++
			}
		}
		if n == len(ids) {
			return ids
		}
		if time.Now().After(deadline) {
			tb.Fatalf("only %d of %d containers have stats", n, len(ids))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestListContainerStatsLatency: with 20 running containers ListContainerStats
// answers from memory, well under 50 ms (the figure is logged).
func TestListContainerStatsLatency(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	podConfig := func(name string) *runtime.PodSandboxConfig {
		cfg := e.podConfig(name)
		e.cleanupPod(cfg)
		return cfg
	}
	ids := statsFleet(t, e.rt(), podConfig, 5, 4)
	var took []time.Duration
	total := 0
	for range 50 {
		start := time.Now()
		resp, err := e.rt().ListContainerStats(e.ctx(), &runtime.ListContainerStatsRequest{})
		took = append(took, time.Since(start))
		if err != nil {
			t.Fatal(err)
		}
		total = len(resp.GetStats())
	}
	slices.Sort(took)
	med, p90 := took[len(took)/2], took[len(took)*9/10]
	t.Logf("ListContainerStats over %d containers (%d of this test, running): median %v, p90 %v, max %v",
		total, len(ids), med, p90, took[len(took)-1])
	if med > 50*time.Millisecond {
		t.Errorf("median %v, want well under 50ms", med)
	}
	var passes []time.Duration
	for range 10 {
		passes = append(passes, cri.StatsPass(e.server().Srv))
	}
	slices.Sort(passes)
	t.Logf("one sampling pass (cgroup files of every running container and pod): median %v, max %v", passes[5], passes[9])
}

// BenchmarkListContainerStats measures ListContainerStats over gRPC with 20
// running containers (5 pods × 4), on a server of its own.
func BenchmarkListContainerStats(b *testing.B) {
	rt := suite.StartServer(b, suite.ServerOptions{}).RT
	podConfig := func(name string) *runtime.PodSandboxConfig {
		suffix := randHex(4)
		return &runtime.PodSandboxConfig{
			Metadata: &runtime.PodSandboxMetadata{Name: name + "-" + suffix, Namespace: testNamespace, Uid: "uid-" + randHex(8)},
			Hostname: name, LogDirectory: b.TempDir(), Labels: map[string]string{"bench": suffix},
		}
	}
	statsFleet(b, rt, podConfig, 5, 4)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		if err != nil {
			return
		}
		for _, p := range resp.GetItems() {
			if _, ok := p.GetLabels()["bench"]; ok {
				_, _ = rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: p.GetId()})
				_, _ = rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: p.GetId()})
			}
		}
	})
	b.ResetTimer()
	for b.Loop() {
		if _, err := rt.ListContainerStats(context.Background(), &runtime.ListContainerStatsRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}
