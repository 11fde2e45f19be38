package doctor

import (
	"bytes"
	"errors"
	"io/fs"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/system"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

var kernelCaps = []string{"CAP_CHOWN", "CAP_KILL", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_SYS_TIME"}

// healthy is a host where everything works.
func healthy() Facts {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return Facts{
		EngineHost: "unix:///var/run/docker.sock", EngineLocal: true, APIVersion: "1.41",
		Version: dockerapi.Version{Version: "20.10.24", APIVersion: "1.41"},
		Info: system.Info{
			Driver: "overlay2", CgroupDriver: "cgroupfs", CgroupVersion: "1",
			SecurityOptions: []string{"name=apparmor", "name=seccomp,profile=default"},
			SystemTime:      now.Add(time.Millisecond).Format(time.RFC3339Nano),
		},
		InfoSent: now, InfoReceived: now.Add(2 * time.Millisecond),
		Host:       sandbox.Host{Capabilities: kernelCaps, FullPrivileged: true, NegativeOOMScoreAdj: true, AppArmor: true},
		KernelCaps: kernelCaps,
		ComposeV2:  "/root/.docker/cli-plugins/docker-compose", PluginDirs: []string{"/root/.docker/cli-plugins"},
		ComposeV1: "/usr/bin/docker-compose", ComposeV1Kind: "python script",
		StateDir:     PathInfo{Path: "/var/lib/cri-compose", Exists: true, Mode: fs.ModeDir | 0o700, Owner: "root:root", Writable: true},
		Socket:       PathInfo{Path: "/run/cri-compose/cri-compose.sock", Exists: true, Mode: fs.ModeSocket | 0o660, Owner: "root:root", Writable: true},
		SocketServed: true,
		EngineSocket: PathInfo{Path: "/var/run/docker.sock", Exists: true, Mode: fs.ModeSocket | 0o660, Owner: "root:docker", Writable: true},
		Sysctls: map[string]string{SysctlBridgeNFIPTables: "1", SysctlBridgeNFIP6Tables: "1", SysctlIPForward: "1",
			SysctlRouteLocalnet: "0"},
		BridgeNetfilter: true,
		PodSubnets:      []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
	}
}

func check(t *testing.T, r Report, name string, want Status, detail ...string) {
	t.Helper()
	c, ok := r.Get(name)
	if !ok {
		t.Errorf("no %q check", name)
		return
	}
	if c.Status != want {
		t.Errorf("%s: %s (%s), want %s", name, c.Status, c.Detail, want)
	}
	for _, d := range detail {
		if !strings.Contains(c.Detail, d) {
			t.Errorf("%s: detail %q does not mention %q", name, c.Detail, d)
		}
	}
}

func TestHealthyHost(t *testing.T) {
	r := Evaluate(healthy())
	for _, c := range r.Checks {
		if c.Status != OK {
			t.Errorf("%s: %s (%s), want ok", c.Name, c.Status, c.Detail)
		}
	}
	if r.Failed() {
		t.Error("Failed() on a healthy host")
	}
	want := []string{CheckEngine, CheckVersion, CheckStorage, CheckCgroups, CheckCapabilities, CheckOOMScoreAdj,
		CheckPrivileged, CheckAppArmor, CheckSeccomp, CheckComposeV2, CheckComposeV1, CheckStateDir, CheckSocket,
		CheckEngineSocket, CheckClock, CheckBridgeNF, CheckBridgeNF6, CheckIPForward, CheckRouteLocalnet}
	if len(r.Checks) != len(want) {
		t.Fatalf("%d checks, want %d", len(r.Checks), len(want))
	}
	for i, c := range r.Checks {
		if c.Name != want[i] {
			t.Errorf("check %d is %q, want %q", i, c.Name, want[i])
		}
	}
	check(t, r, CheckVersion, OK, "20.10.24", "API 1.41")
	check(t, r, CheckCgroups, OK, "cgroupfs", "cgroup v1")
	check(t, r, CheckSeccomp, OK, "profile=default")
}

// TestMissingCapabilities is this workplace's hosts: no CAP_SYS_RESOURCE in
// the bounding set, no AppArmor.
func TestMissingCapabilities(t *testing.T) {
	f := healthy()
	f.Host = sandbox.Host{Capabilities: []string{"CAP_CHOWN", "CAP_KILL", "CAP_SYS_ADMIN", "CAP_SYS_TIME"}}
	f.Info.SecurityOptions = []string{"name=seccomp,profile=default"}
	r := Evaluate(f)
	check(t, r, CheckCapabilities, Degraded, "missing 1 of the 5 the kernel and the engine know", "CAP_SYS_RESOURCE")
	check(t, r, CheckOOMScoreAdj, Degraded, "unavailable", "CAP_SYS_RESOURCE")
	check(t, r, CheckPrivileged, Degraded, "unavailable", "CAP_SYS_RESOURCE", "the 4 capabilities")
	check(t, r, CheckAppArmor, Degraded, "not enabled")
	if r.Failed() {
		t.Error("Failed(): degraded checks must not fail the report")
	}
}

func TestEngineDown(t *testing.T) {
	f := healthy()
	f.PingErr = errors.New("connection refused")
	f.Info, f.Version = system.Info{}, dockerapi.Version{}
	r := Evaluate(f)
	check(t, r, CheckEngine, Fail, "connection refused")
	for _, name := range []string{CheckVersion, CheckStorage, CheckCgroups, CheckAppArmor, CheckSeccomp, CheckClock, CheckEngineSocket} {
		check(t, r, name, Fail)
	}
	if !r.Failed() {
		t.Error("not Failed() with the engine down")
	}
}

func TestRemoteEngine(t *testing.T) {
	f := healthy()
	f.EngineHost, f.EngineLocal, f.EngineSocket = "tcp://10.0.0.1:2375", false, PathInfo{}
	f.Host.Capabilities = nil
	r := Evaluate(f)
	check(t, r, CheckCapabilities, Degraded, "not checked", "tcp://10.0.0.1:2375")
	// This host's sysctls are not the engine host's.
	check(t, r, CheckBridgeNF, Degraded, "not checked", "tcp://10.0.0.1:2375")
	check(t, r, CheckIPForward, Degraded, "not checked")
	check(t, r, CheckRouteLocalnet, OK, "not checked")
	if _, ok := r.Get(CheckEngineSocket); ok {
		t.Error("engine socket checked for a tcp engine")
	}
}

func TestPaths(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Facts)
		check  string
		want   Status
		detail string
	}{
		{"state dir to create", func(f *Facts) {
			f.StateDir = PathInfo{Path: "/var/lib/cri-compose", Parent: "/var/lib", ParentWritable: true}
		}, CheckStateDir, OK, "does not exist yet"},
		{"state dir cannot be created", func(f *Facts) {
			f.StateDir = PathInfo{Path: "/var/lib/cri-compose", Parent: "/var/lib"}
		}, CheckStateDir, Fail, "not writable"},
		{"state dir read-only", func(f *Facts) { f.StateDir.Writable = false }, CheckStateDir, Fail, "not writable"},
		{"state dir a file", func(f *Facts) { f.StateDir.Mode = 0o644 }, CheckStateDir, Fail, "not a folder"},
		{"state dir world-writable", func(f *Facts) { f.StateDir.Mode = fs.ModeDir | 0o777 }, CheckStateDir, Degraded, "everyone"},
		{"state dir open to others", func(f *Facts) { f.StateDir.Mode = fs.ModeDir | 0o755 }, CheckStateDir, Degraded, "open to other users"},
		{"socket missing", func(f *Facts) {
			f.Socket, f.SocketServed = PathInfo{Path: "/run/cri-compose/cri-compose.sock"}, false
		}, CheckSocket, Degraded, "not running"},
		{"socket stale", func(f *Facts) { f.SocketServed = false }, CheckSocket, Degraded, "stale"},
		{"socket for everyone", func(f *Facts) { f.Socket.Mode = fs.ModeSocket | 0o666 }, CheckSocket, Fail, "anyone"},
		{"socket a file", func(f *Facts) { f.Socket.Mode = 0o660 }, CheckSocket, Fail, "not a socket"},
		{"engine socket for everyone", func(f *Facts) { f.EngineSocket.Mode = fs.ModeSocket | 0o666 }, CheckEngineSocket, Degraded, "anyone"},
		{"vfs", func(f *Facts) { f.Info.Driver = "vfs" }, CheckStorage, Degraded, "vfs"},
		{"no cgroups", func(f *Facts) { f.Info.CgroupDriver = "none" }, CheckCgroups, Degraded, "no cgroup driver"},
		{"no seccomp", func(f *Facts) { f.Info.SecurityOptions = nil }, CheckSeccomp, Degraded, "not enabled"},
		{"no compose v2", func(f *Facts) { f.ComposeV2 = "" }, CheckComposeV2, Degraded, "/root/.docker/cli-plugins"},
		{"no compose at all", func(f *Facts) { f.ComposeV2, f.ComposeV1 = "", "" }, CheckComposeV1, Degraded, "no Compose view"},
		{"v2 only", func(f *Facts) { f.ComposeV1 = "" }, CheckComposeV1, OK, "not needed"},
		{"clock ahead", func(f *Facts) {
			f.Info.SystemTime = f.InfoSent.Add(5 * time.Second).Format(time.RFC3339Nano)
		}, CheckClock, Degraded, "4.999s ahead of"},
		{"clock behind", func(f *Facts) {
			f.Info.SystemTime = f.InfoSent.Add(-3 * time.Second).Format(time.RFC3339Nano)
		}, CheckClock, Degraded, "3.001s behind"},
		{"slow answer, no skew", func(f *Facts) {
			f.InfoReceived = f.InfoSent.Add(4 * time.Second)
			f.Info.SystemTime = f.InfoSent.Add(2500 * time.Millisecond).Format(time.RFC3339Nano)
		}, CheckClock, OK, "±2s"},
		{"no engine time", func(f *Facts) { f.Info.SystemTime = "" }, CheckClock, Degraded, "no usable time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			tc.change(&f)
			check(t, Evaluate(f), tc.check, tc.want, tc.detail)
		})
	}
}

// TestClusterNetworking: the sysctls kube-proxy and an overlay need
// degrade the report when missing, never fail it, and each detail says
// what breaks and how to fix it.
func TestClusterNetworking(t *testing.T) {
	dualStack := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}
	for _, tc := range []struct {
		name   string
		change func(*Facts)
		check  string
		want   Status
		detail []string
	}{
		{"bridge-nf on", func(*Facts) {}, CheckBridgeNF, OK, []string{SysctlBridgeNFIPTables + "=1"}},
		{"br_netfilter not loaded", func(f *Facts) {
			f.BridgeNetfilter = false
			delete(f.Sysctls, SysctlBridgeNFIPTables)
			delete(f.Sysctls, SysctlBridgeNFIP6Tables)
		}, CheckBridgeNF, Degraded, []string{"not loaded", "/proc/sys/net/bridge", "skip kube-proxy's NAT", "modprobe br_netfilter",
			"sysctl -w net.bridge.bridge-nf-call-iptables=1"}},
		{"bridge-nf off", func(f *Facts) { f.Sysctls[SysctlBridgeNFIPTables] = "0" }, CheckBridgeNF, Degraded,
			[]string{"=0", "Services: replies from a pod on the same bridge skip kube-proxy's NAT", "sysctl -w net.bridge.bridge-nf-call-iptables=1"}},
		{"bridge-nf unreadable", func(f *Facts) { delete(f.Sysctls, SysctlBridgeNFIPTables) }, CheckBridgeNF, Degraded,
			[]string{"cannot read /proc/sys/net/bridge/bridge-nf-call-iptables"}},
		{"ip6tables off without IPv6", func(f *Facts) { f.Sysctls[SysctlBridgeNFIP6Tables] = "0" }, CheckBridgeNF6, OK,
			[]string{"no IPv6 subnet"}},
		{"br_netfilter not loaded, no IPv6", func(f *Facts) {
			f.BridgeNetfilter = false
			delete(f.Sysctls, SysctlBridgeNFIP6Tables)
		}, CheckBridgeNF6, OK, []string{"not needed"}},
		{"ip6tables on with IPv6", func(f *Facts) { f.PodSubnets = dualStack }, CheckBridgeNF6, OK,
			[]string{SysctlBridgeNFIP6Tables + "=1", "fd00:10:244:1::/64"}},
		{"ip6tables off with IPv6", func(f *Facts) {
			f.PodSubnets = dualStack
			f.Sysctls[SysctlBridgeNFIP6Tables] = "0"
		}, CheckBridgeNF6, Degraded, []string{"=0", "skip kube-proxy's NAT", "IPv6: fd00:10:244:1::/64", "sysctl -w net.bridge.bridge-nf-call-ip6tables=1"}},
		{"br_netfilter not loaded, IPv6", func(f *Facts) {
			f.PodSubnets = dualStack
			f.BridgeNetfilter = false
			delete(f.Sysctls, SysctlBridgeNFIP6Tables)
		}, CheckBridgeNF6, Degraded, []string{"modprobe br_netfilter", "sysctl -w net.bridge.bridge-nf-call-ip6tables=1"}},
		{"ip forwarding on", func(*Facts) {}, CheckIPForward, OK, []string{"net.ipv4.ip_forward=1"}},
		{"ip forwarding off", func(f *Facts) { f.Sysctls[SysctlIPForward] = "0" }, CheckIPForward, Degraded,
			[]string{"cannot reach beyond this host", "sysctl -w net.ipv4.ip_forward=1"}},
		{"ip forwarding unreadable", func(f *Facts) { delete(f.Sysctls, SysctlIPForward) }, CheckIPForward, Degraded,
			[]string{"cannot read /proc/sys/net/ipv4/ip_forward"}},
		{"route_localnet off", func(*Facts) {}, CheckRouteLocalnet, OK, []string{"=0", "NodePorts", "127.0.0.1"}},
		{"route_localnet on", func(f *Facts) { f.Sysctls[SysctlRouteLocalnet] = "1" }, CheckRouteLocalnet, OK,
			[]string{"=1", "kube-proxy"}},
		{"route_localnet unreadable", func(f *Facts) { delete(f.Sysctls, SysctlRouteLocalnet) }, CheckRouteLocalnet, OK,
			[]string{"cannot read /proc/sys/net/ipv4/conf/all/route_localnet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := healthy()
			tc.change(&f)
			r := Evaluate(f)
			check(t, r, tc.check, tc.want, tc.detail...)
			if r.Failed() {
				t.Error("Failed(): cluster networking must not fail the report")
			}
		})
	}
}

func TestWriteTable(t *testing.T) {
	r := Report{Checks: []Check{
		{Name: "engine", Status: OK, Detail: "answers"},
		{Name: "negative oom_score_adj", Status: Degraded, Detail: "unavailable:\nCAP_SYS_RESOURCE   missing"},
		{Name: "state dir", Status: Fail, Detail: "not writable"},
	}}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := "CHECK                   STATUS    DETAIL\n" +
		"engine                  ok        answers\n" +
		"negative oom_score_adj  degraded  unavailable: CAP_SYS_RESOURCE missing\n" +
		"state dir               fail      not writable\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	if !r.Failed() {
		t.Error("Failed() false with a failed check")
	}
}
