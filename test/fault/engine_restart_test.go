package fault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/daemon"
	"github.com/cri-compose/cri-compose/test/images"
)

// privateEngine is a Docker engine of the test's own, beside the
// machine's (which is never restarted: other tests share it). It runs in a
// network namespace of its own, so nothing it does to links, addresses,
// routes or iptables can reach the machine's: dockerd 20.10 restarted
// with --default-address-pool and without --live-restore deletes the
// interface named docker0, whatever --bridge says, which on the host
// would break the machine's engine. Inside, it gets a bridge of its own,
// no iptables rules, no masquerading, addresses in 10.123.0.0/16, and its
// cgroups live under a parent of their own.
type privateEngine struct {
	t      *testing.T
	dir    string
	sock   string
	netns  string
	bridge string
	subnet string // a /24 for the pod network

	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

// startPrivateEngine starts dockerd on a temp dir in a network namespace
// of its own, or skips t where that cannot be done (not root, no dockerd,
// ip or nsenter).
func startPrivateEngine(t *testing.T, liveRestore bool) *privateEngine {
	t.Helper()
	if os.Getuid() != 0 {
		images.SkipOrFail(t, "a private Docker engine needs root")
	}
	for _, bin := range []string{"dockerd", "ip", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			images.SkipOrFail(t, "a private Docker engine needs %s: %v", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "ccde-")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := hex.EncodeToString(b)
	e := &privateEngine{t: t, dir: dir, sock: filepath.Join(dir, "docker.sock"), netns: "ccde-" + name, bridge: "ccbr-" + name}
	docker0, mtu := addrOf("docker0")
	t.Cleanup(func() {
		e.destroy()
		checkDocker0(t, docker0, mtu)
	})
	if out, err := exec.Command("ip", "netns", "add", e.netns).CombinedOutput(); err != nil {
		t.Fatalf("network namespace %s: %v\n%s", e.netns, err, out)
	}
	r, _ := rand.Int(rand.Reader, big.NewInt(250))
	third := int(r.Int64()) + 2
	if out, err := exec.Command("sh", "-c", fmt.Sprintf(
		"ip -n %[1]s link set lo up && ip -n %[1]s link add %[2]s type bridge && ip -n %[1]s addr add 10.123.%[3]d.1/24 dev %[2]s && ip -n %[1]s link set %[2]s up",
		e.netns, e.bridge, third)).CombinedOutput(); err != nil {
		t.Fatalf("bridge %s: %v\n%s", e.bridge, err, out)
	}
	e.subnet = fmt.Sprintf("10.123.%d.0/24", third%250+3)
	e.start(liveRestore)
	return e
}

// addrOf is the IPv4 address (with prefix) and MTU of a host interface,
// or "" when it does not exist.
func addrOf(dev string) (addr, mtu string) {
	out, err := exec.Command("ip", "-4", "-o", "addr", "show", "dev", dev).Output()
	if err != nil {
		return "", ""
	}
	f := strings.Fields(string(out))
	for i, w := range f {
		if w == "inet" && i+1 < len(f) {
			addr = f[i+1]
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show", "dev", dev).Output()
	f = strings.Fields(string(out))
	for i, w := range f {
		if w == "mtu" && i+1 < len(f) {
			mtu = f[i+1]
		}
	}
	return addr, mtu
}

// checkDocker0 fails t when the host's docker0 is no longer what it was,
// and puts it back if it is gone (the machine's engine needs it).
func checkDocker0(t *testing.T, addr, mtu string) {
	if addr == "" {
		return
	}
	now, _ := addrOf("docker0")
	if now == addr {
		return
	}
	t.Errorf("the host's docker0 changed during the test: %q, was %q", now, addr)
	if now == "" {
		cmd := fmt.Sprintf("ip link add docker0 type bridge 2>/dev/null; ip addr add %s dev docker0; ip link set docker0 mtu %s up", addr, mtu)
		out, err := exec.Command("sh", "-c", cmd).CombinedOutput()
		t.Logf("restored docker0 (%s): %v %s", cmd, err, out)
	}
}

func (e *privateEngine) host() string { return "unix://" + e.sock }

// start runs dockerd and waits until it answers.
func (e *privateEngine) start(liveRestore bool) {
	e.t.Helper()
	e.starts++
	logf, err := os.Create(filepath.Join(e.dir, fmt.Sprintf("dockerd.%d.log", e.starts)))
	if err != nil {
		e.t.Fatal(err)
	}
	// Its own (empty) config file: the machine's /etc/docker/daemon.json
	// would clash with these flags, or change the machine's engine's setup.
	cfgFile := filepath.Join(e.dir, "daemon.json")
	if err := os.WriteFile(cfgFile, []byte("{}\n"), 0o644); err != nil {
		e.t.Fatal(err)
	}
	args := []string{
		"--config-file", cfgFile,
		"--host", e.host(),
		"--data-root", filepath.Join(e.dir, "data"),
		"--exec-root", filepath.Join(e.dir, "exec"),
		"--pidfile", filepath.Join(e.dir, "docker.pid"),
		"--bridge", e.bridge,
		"--iptables=false", "--ip-masq=false", "--ip-forward=false", "--ip6tables=false",
		"--default-address-pool", "base=10.123.0.0/16,size=24",
		"--storage-driver", "vfs",
		"--cgroup-parent", "/" + e.bridge,
		"--userland-proxy=false",
		"--log-level", "warn",
		"--live-restore=" + strconv.FormatBool(liveRestore),
	}
	// nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroups.
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + e.netns, "dockerd"}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the test process dies, dockerd stops (and cleans up) too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		e.t.Fatalf("dockerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	e.cmd, e.exited = cmd, exited
	c, err := dockerapi.New(e.host())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			e.t.Fatalf("private dockerd exited at start: %v\n%s", cmd.ProcessState, e.log())
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("private dockerd does not answer after 60s: %v\n%s", err, e.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *privateEngine) log() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, fmt.Sprintf("dockerd.%d.log", e.starts)))
	return string(b)
}

// stop ends dockerd with SIGTERM, as `systemctl restart docker` does.
func (e *privateEngine) stop() {
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(60 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.exited
		e.t.Errorf("private dockerd did not stop within 60s of SIGTERM")
	}
	e.cmd = nil
}

// destroy removes every container and network of the engine, stops it,
// and removes its folder and bridge.
func (e *privateEngine) destroy() {
	if e.cmd != nil {
		eng := daemon.NewEngine(e.t, e.host())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		list, _ := eng.ContainerList(ctx)
		for _, c := range list {
			_ = eng.ContainerRemove(ctx, c.ID)
		}
		for _, n := range e.networks(ctx) {
			_ = eng.NetworkRemove(ctx, n)
		}
		cancel()
		e.stop()
	}
	// vfs layers and shm mounts are gone once dockerd stopped; anything
	// still mounted below dir is unmounted first.
	if out, err := exec.Command("sh", "-c", "grep -o ' "+e.dir+"[^ ]*' /proc/self/mounts | sort -r | xargs -r -n1 umount -l").CombinedOutput(); err != nil {
		e.t.Logf("unmount below %s: %v %s", e.dir, err, out)
	}
	if err := os.RemoveAll(e.dir); err != nil {
		e.t.Logf("remove %s: %v", e.dir, err)
	}
	// The (empty) cgroups under its parent.
	if out, err := exec.Command("sh", "-c", "for d in /sys/fs/cgroup/*/"+e.bridge+" /sys/fs/cgroup/"+e.bridge+"; do [ -d \"$d\" ] && find \"$d\" -depth -type d -exec rmdir {} +; done; true").CombinedOutput(); err != nil {
		e.t.Logf("remove cgroups %s: %v %s", e.bridge, err, out)
	}
	// Its bridges and the pod network's go with the namespace.
	if out, err := exec.Command("ip", "netns", "del", e.netns).CombinedOutput(); err != nil {
		e.t.Errorf("remove network namespace %s: %v %s", e.netns, err, out)
	}
}

// networks are the names of the engine's own networks (not the defaults).
func (e *privateEngine) networks(ctx context.Context) []string {
	out, _ := exec.CommandContext(ctx, "docker", "-H", e.host(), "network", "ls", "--format", "{{.Name}}").Output()
	var names []string
	for _, n := range strings.Fields(string(out)) {
		if n != "bridge" && n != "host" && n != "none" {
			names = append(names, n)
		}
	}
	return names
}

// counterCmd prints "line N" ten times a second, so a gap or a repeat in
// its CRI log shows.
var counterCmd = []string{"sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.1; done"}

// checkCounter reads a counter's CRI log and checks that it holds line 0
// to line N, each once, in order, with N ≥ atLeast; it returns N.
func checkCounter(t *testing.T, path string, atLeast int) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		_, rest, ok := strings.Cut(l, " stdout F line ")
		if !ok {
			t.Errorf("unexpected log line %q", l)
			continue
		}
		if rest != strconv.Itoa(next) {
			t.Fatalf("log line %q, want line %d: lost or repeated output\n%s", l, next, b)
		}
		next++
	}
	if next-1 < atLeast {
		t.Fatalf("log ends at line %d, want at least %d", next-1, atLeast)
	}
	return next - 1
}

// waitCounter waits until the counter's log reaches line n.
func waitCounter(t *testing.T, path string, n int, timeout time.Duration) {
	t.Helper()
	waitLog(t, path, fmt.Sprintf("stdout F line %d\n", n), timeout)
}

// TestEngineRestart: the Docker engine restarts while pods run. With
// live-restore the pods keep running and cri-compose reports them so once
// the engine is back, their CRI logs going on without a gap or a repeated
// line; without it the engine stops them, cri-compose reports them
// NOTREADY and EXITED with their whole output in the log, and kubelet's
// retry makes a working pod again. cri-compose is never restarted.
func TestEngineRestart(t *testing.T) {
	t.Parallel()
	pe := startPrivateEngine(t, true)
	k := newKube(t, pe.host(), daemon.Config{DockerHost: pe.host(), NetworkSubnet: pe.subnet})
	k.d.Start()
	pid := k.d.Pid()

	pod := k.podConfig("web", 0)
	id := k.run(pod)
	ctr := ctrConfig("counter", 0)
	ctr.Command = counterCmd
	c := k.create(id, ctr)
	k.start(c)
	logPath := filepath.Join(pod.GetLogDirectory(), "counter", "0.log")
	waitCounter(t, logPath, 5, 20*time.Second)

	// 1. Restart with live-restore: the pod runs on.
	t0 := time.Now()
	pe.stop()
	waitReady(t, k, false, 10*time.Second)
	time.Sleep(time.Second) // the counter writes on while the engine is down
	pe.start(true)
	waitReady(t, k, true, 30*time.Second)
	t.Logf("live-restore restart: ready again %v after the engine stopped", time.Since(t0).Round(time.Millisecond))
	if st := podState(k, id); st != runtime.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod after a live-restore restart: %v, want READY", st)
	}
	if st := ctrState(k, c); st != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after a live-restore restart: %v, want RUNNING", st)
	}
	n := checkCounter(t, logPath, 5)
	waitCounter(t, logPath, n+20, 30*time.Second)
	checkCounter(t, logPath, n+20)
	k.expect("after a live-restore restart", map[string][]string{id: {c}})

	// 2. Restart without live-restore: the engine stops the pod.
	pe.stop()
	waitReady(t, k, false, 10*time.Second)
	pe.start(false)
	waitReady(t, k, true, 30*time.Second)
	waitState(t, k, c, runtime.ContainerState_CONTAINER_EXITED, 15*time.Second)
	if st := podState(k, id); st != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod after a restart that stopped it: %v, want NOTREADY", st)
	}
	last := checkCounter(t, logPath, n+20)
	k.expect("after a restart that stopped the pod", map[string][]string{id: {c}})
	// kubelet: stop the dead pod, run attempt 1, remove attempt 0.
	k.stopPod(id)
	id1 := k.run(k.podConfig("web", 1))
	ctr1 := ctrConfig("counter", 1) // kubelet counts restarts on: counter/1.log
	ctr1.Command = counterCmd
	c1 := k.create(id1, ctr1)
	k.start(c1)
	k.removePod(id)
	waitCounter(t, filepath.Join(k.pods[id1].GetLogDirectory(), "counter", "1.log"), 3, 20*time.Second)
	k.expect("after kubelet's retry", map[string][]string{id1: {c1}})
	if got := checkCounter(t, logPath, last); got != last {
		t.Errorf("the old attempt's log grew from line %d to %d", last, got)
	}
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}
	k.teardown()
}
