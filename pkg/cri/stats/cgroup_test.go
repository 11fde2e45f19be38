package stats

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
)

// These tests read fake /proc and cgroup trees: the real ones are read by
// the integration tests of package cri (stats_test.go).

// The cgroup readers check that what they open is on a cgroup
// filesystem, but in their test mode.
func init() { cgroups.TestMode = true }

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const statsTestID = "f9753e5ca0af41a91c786fc9fe3d22da53cc2b01b02febae646058ddafbc59c0"

func TestStatsCgroupV1(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "cg")
	// Separate cpu and cpuacct mounts (as on this project's CI machine), a
	// hybrid controller-less unified mount, and an escaped space.
	mountinfo := strings.Join([]string{
		"31 23 0:28 / " + cg + " rw - tmpfs tmpfs rw",
		"32 31 0:29 / " + cg + "/cpu rw - cgroup cgroup rw,cpu",
		"33 31 0:30 / " + cg + "/cpuacct rw - cgroup cgroup rw,cpuacct",
		"35 31 0:32 / " + cg + `/mem\040ory rw - cgroup cgroup rw,memory`,
		"39 31 0:36 / " + cg + "/pids rw - cgroup cgroup rw,pids",
		"41 31 0:38 / " + cg + "/unified rw - cgroup2 cgroup2 rw",
	}, "\n") + "\n"
	dir := "/kubepods/pod1/" + statsTestID
	writeFiles(t, root, map[string]string{
		"proc/self/mountinfo": mountinfo,
		"proc/42/cgroup": "9:name=systemd:" + dir + "\n8:pids:" + dir + "\n4:memory:" + dir +
			"\n2:cpuacct:" + dir + "\n1:cpu:" + dir + "\n0::" + dir + "\n",
		"proc/42/net/dev": "Inter-|   Receive                                                |  Transmit\n" +
			" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n" +
			"    lo:     100       1    0    0    0     0          0         0      100       1    0    0    0     0       0          0\n" +
			"  eth0:     486       5    1    2    0     0          0         0      900       7    3    4    0     0       0          0\n",
		"cg/cpuacct" + dir + "/cpuacct.usage":            "688098897\n",
		"cg/mem ory" + dir + "/memory.usage_in_bytes":    "69722112\n",
		"cg/mem ory" + dir + "/memory.limit_in_bytes":    "9223372036854771712\n",
		"cg/mem ory" + dir + "/memory.stat":              "cache 1\nrss 2\ntotal_cache 1732608\ntotal_rss 67411968\ntotal_inactive_file 974848\ntotal_pgfault 1177\ntotal_pgmajfault 24\n",
		"cg/pids" + dir + "/pids.current":                "3\n",
		"cg/pids" + dir + "/pids.max":                    "max\n",
		"cg/cpuacct/kubepods/pod1/cpuacct.usage":         "1688098897\n",
		"cg/mem ory/kubepods/pod1/memory.usage_in_bytes": "79722112\n",
		"cg/mem ory/kubepods/pod1/memory.limit_in_bytes": "104857600\n",
		"cg/mem ory/kubepods/pod1/memory.stat":           "total_rss 67411968\ntotal_inactive_file 974848\n",
	})
	// The files a v1 kernel has beside those the figures come from.
	for _, d := range []string{dir, "/kubepods/pod1"} {
		writeFiles(t, cg, map[string]string{
			"cpuacct" + d + "/cpuacct.stat":              "user 50\nsystem 18\n",
			"cpuacct" + d + "/cpuacct.usage_percpu":      "1 2\n",
			"mem ory" + d + "/memory.max_usage_in_bytes": "80000000\n",
			"mem ory" + d + "/memory.failcnt":            "0\n",
			"mem ory" + d + "/memory.use_hierarchy":      "1\n",
		})
	}
	fs, err := loadCgroupFS(filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	if !fs.v1Mode() {
		t.Fatalf("v1 controllers not found: %+v", fs.v1)
	}
	p, err := fs.paths(42, statsTestID)
	if err != nil {
		t.Fatal(err)
	}
	if p.v2 || p.cpu != filepath.Join(cg, "cpuacct", dir) || p.memory != filepath.Join(cg, "mem ory", dir) {
		t.Fatalf("paths %+v", p)
	}
	u, err := p.read()
	if err != nil {
		t.Fatal(err)
	}
	want := cgroupUsage{cpuNanos: 688098897, procs: 3, hasProcs: true, memory: memUsage{
		usage: 69722112, workingSet: 69722112 - 974848, rss: 67411968, cache: 1732608, pgfault: 1177, pgmajfault: 24}}
	if u != want {
		t.Errorf("usage\n got %+v\nwant %+v", u, want)
	}
	pu, err := p.parent().read()
	if err != nil {
		t.Fatal(err)
	}
	if pu.cpuNanos != 1688098897 || pu.memory.limit != 104857600 || pu.memory.workingSet != 79722112-974848 {
		t.Errorf("pod cgroup usage %+v", pu)
	}
	if _, err := fs.paths(42, "0123456789ab"); err == nil {
		t.Error("a cgroup not named after the container was accepted")
	}
	ifs, err := readNetDev(filepath.Join(root, "proc"), 42)
	if err != nil {
		t.Fatal(err)
	}
	wantIf := ifaceUsage{name: "eth0", rxBytes: 486, rxPackets: 5, rxErrors: 1, rxDropped: 2, txBytes: 900, txPackets: 7, txErrors: 3, txDropped: 4}
	if len(ifs) != 1 || ifs[0] != wantIf {
		t.Errorf("net/dev: got %+v, want [%+v]", ifs, wantIf)
	}
}

func TestStatsCgroupV2(t *testing.T) {
	root := t.TempDir()
	cg := filepath.Join(root, "cg")
	// A process in a cgroup namespace: the mount's root is not "/".
	dir := "/system.slice/docker-" + statsTestID + ".scope"
	writeFiles(t, root, map[string]string{
		"proc/self/mountinfo":          "30 23 0:26 /host " + cg + " rw - cgroup2 cgroup2 rw,nsdelegate\n",
		"proc/7/cgroup":                "0::/host" + dir + "\n",
		"cg" + dir + "/cpu.stat":       "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
		"cg" + dir + "/memory.current": "1000000\n",
		"cg" + dir + "/memory.max":     "max\n",
		"cg" + dir + "/memory.stat":    "anon 600000\nfile 300000\ninactive_file 100000\npgfault 10\npgmajfault 1\n",
		"cg" + dir + "/pids.current":   "2\n",
		"cg" + dir + "/pids.max":       "max\n",
	})
	fs, err := loadCgroupFS(filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := fs.paths(7, statsTestID)
	if err != nil {
		t.Fatal(err)
	}
	if !p.v2 || p.cpu != filepath.Join(cg, dir) {
		t.Fatalf("paths %+v", p)
	}
	u, err := p.read()
	if err != nil {
		t.Fatal(err)
	}
	want := cgroupUsage{cpuNanos: 2500000, procs: 2, hasProcs: true, memory: memUsage{
		usage: 1000000, workingSet: 900000, rss: 600000, cache: 300000, pgfault: 10, pgmajfault: 1}}
	if u != want {
		t.Errorf("usage\n got %+v\nwant %+v", u, want)
	}
}

func TestStatsRate(t *testing.T) {
	prev := usageSample{at: 1e9, cpu: 5e9}
	cur := usageSample{at: 3e9, cpu: 6e9}.withRate(prev, true)
	if !cur.hasRate || cur.nanoCores != 5e8 {
		t.Errorf("rate %v %d, want 5e8", cur.hasRate, cur.nanoCores)
	}
	if s := (usageSample{at: 3e9, cpu: 6e9}).withRate(prev, false); s.hasRate {
		t.Error("a rate without a previous sample")
	}
	if s := (usageSample{at: 3e9, cpu: 1e9}).withRate(prev, true); s.hasRate {
		t.Error("a rate from a counter that went back (a new process)")
	}
}
