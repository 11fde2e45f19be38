package doctor

import (
	"bytes"
	"errors"
	"io/fs"
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
		CheckEngineSocket, CheckClock}
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
