// Package privengine runs a private Docker engine for tests that stop,
// restart or reach an engine as a remote host (test/fault, test/remote),
// beside the machine's own, which is never restarted: other tests share
// it, and an engine restarted by hand would be gone for the next run.
package privengine

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

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// Engine is a Docker engine of the test's own, beside the
// machine's (which is never restarted: other tests share it). It runs in a
// network namespace of its own, so nothing it does to links, addresses,
// routes or iptables can reach the machine's: dockerd 20.10 restarted
// with --default-address-pool and without --live-restore deletes the
// interface named docker0, whatever --bridge says, which on the host
// would break the machine's engine. Inside, it gets a bridge of its own,
// no iptables rules, no masquerading, addresses in 10.123.0.0/16, and its
// cgroups live under a parent of their own.
type Engine struct {
	t      testing.TB
	dir    string
	sock   string
	netns  string
	bridge string
	subnet string // a /24 for the pod network

	opts   Options
	linkIP string // the namespace's end of the link to the host (Options.Link)
	// The link's host end (its address) and the names of both ends.
	hostLinkIP, hostLink, nsLink string

	cmd    *exec.Cmd
	exited chan struct{}
	starts int

	// Options.Current: the binaries, how long building them took, and
	// the containerd of this engine.
	bins       toolcache.EngineBinaries
	built      time.Duration
	ctrd       *exec.Cmd
	ctrdExited chan struct{}
	ctrdStarts int
}

// Options are how a private engine runs.
type Options struct {
	LiveRestore bool
	// Link joins the namespace to the host with a veth pair (a /30 in
	// 10.124.0.0/16), so that a TCP listener of the engine (Args) is
	// reachable from the host at LinkIP.
	Link bool
	// Args are more dockerd flags, given at every start (e.g. a TLS
	// listener: --host tcp://LINKIP:PORT --tlsverify ...). A func, as
	// they may depend on LinkIP.
	Args func(e *Engine) []string
	// Current runs a current Docker Engine instead of the machine's
	// dockerd: dockerd and containerd at the versions test/engine/tools
	// pins, built once into the tool cache (toolcache.CurrentEngine; a cold
	// build takes many CPU-minutes). dockerd uses a containerd of its own,
	// started in the same namespace (Containerd) with its root, state,
	// sockets and shim under the engine's folder; it runs on until the test
	// ends, across Stop and StartDaemon, as a containerd service does
	// across restarts of the docker service. runc is built too (Debian
	// 12's is too old for Docker 29).
	Current bool
}

// Start starts dockerd on a temp dir in a network namespace
// of its own, or skips t where that cannot be done (not root, no dockerd,
// ip or nsenter).
//
// With CRI_COMPOSE_ENGINE=current in the environment (ENGINE=current of the
// Makefile's suite targets), every private engine is a current one, so that
// a suite's restarts and second hosts test the same engine as the rest.
func Start(t testing.TB, opts Options) *Engine {
	t.Helper()
	if os.Getenv("CRI_COMPOSE_ENGINE") == "current" {
		opts.Current = true
	}
	if os.Getuid() != 0 {
		images.SkipOrFail(t, "a private Docker engine needs root")
	}
	need := []string{"dockerd", "ip", "nsenter"}
	if opts.Current {
		need = []string{"ip", "nsenter"}
	}
	for _, bin := range need {
		if _, err := exec.LookPath(bin); err != nil {
			images.SkipOrFail(t, "a private Docker engine needs %s: %v", bin, err)
		}
	}
	var bins toolcache.EngineBinaries
	var built time.Duration
	if opts.Current {
		root, err := suite.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		bins, built, err = toolcache.CurrentEngine(ctx, root)
		cancel()
		if err != nil {
			t.Fatalf("current engine: %v", err)
		}
		if built > 0 {
			t.Logf("built dockerd %s, containerd %s and runc %s in %v", bins.DockerdVersion, bins.ContainerdVersion, bins.RuncVersion, built.Round(time.Second))
		}
	}
	dir, err := os.MkdirTemp("", "ccde-")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := hex.EncodeToString(b)
	e := &Engine{t: t, dir: dir, sock: filepath.Join(dir, "docker.sock"), netns: "ccde-" + name, bridge: "ccbr-" + name, bins: bins, built: built}
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
	e.opts = opts
	if opts.Link {
		host, ns := "ccvh-"+name, "ccvn-"+name
		e.linkIP = fmt.Sprintf("10.124.%d.2", third)
		e.hostLinkIP, e.hostLink, e.nsLink = fmt.Sprintf("10.124.%d.1", third), host, ns
		// The pair goes with the namespace (destroy): deleting one end
		// deletes the other.
		if out, err := exec.Command("sh", "-c", fmt.Sprintf(
			"ip link add %[1]s type veth peer name %[2]s netns %[3]s && ip addr add 10.124.%[4]d.1/30 dev %[1]s && ip link set %[1]s up && ip -n %[3]s addr add %[5]s/30 dev %[2]s && ip -n %[3]s link set %[2]s up",
			host, ns, e.netns, third, e.linkIP)).CombinedOutput(); err != nil {
			t.Fatalf("link to %s: %v\n%s", e.netns, err, out)
		}
	}
	e.StartDaemon(opts.LiveRestore)
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
func checkDocker0(t testing.TB, addr, mtu string) {
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

// Host is the engine's unix socket endpoint.
func (e *Engine) Host() string { return "unix://" + e.sock }

// DefaultRoute gives the namespace a default route, through its bridge,
// as a machine has: kube-apiserver takes the address it advertises from
// the default route's interface and will not start without one. Nothing
// leaves by it: the bridge has no way out.
func (e *Engine) DefaultRoute() {
	e.t.Helper()
	if out, err := exec.Command("ip", "-n", e.netns, "route", "replace", "default", "dev", e.bridge).CombinedOutput(); err != nil {
		e.t.Fatalf("default route in %s: %v\n%s", e.netns, err, out)
	}
}

// NetNS is the path of the engine's network namespace, for
// `nsenter --net=` (not `ip netns exec`, which remounts /sys and so hides
// the cgroups).
func (e *Engine) NetNS() string { return "/run/netns/" + e.netns }

// Sock is the path of the engine's unix socket.
func (e *Engine) Sock() string { return e.sock }

// Dir is the engine's folder (data, exec root, logs); tests may keep
// their own files there.
func (e *Engine) Dir() string { return e.dir }

// Subnet is a /24 for a pod network on this engine.
func (e *Engine) Subnet() string { return e.subnet }

// LinkIP is the engine's address on the link to the host (Options.Link).
func (e *Engine) LinkIP() string { return e.linkIP }

// HostLinkIP is the host's address on that link.
func (e *Engine) HostLinkIP() string { return e.hostLinkIP }

// Links are the names of the link's ends: the host's, and the namespace's
// (for a daemon that must pick the interface to other hosts, as flanneld's
// --iface).
func (e *Engine) Links() (host, ns string) { return e.hostLink, e.nsLink }

// Binaries are the engine's programs (Options.Current; zero otherwise).
func (e *Engine) Binaries() toolcache.EngineBinaries { return e.bins }

// Built is how long Start spent building the engine's programs
// (Options.Current): 0 when they came from the tool cache.
func (e *Engine) Built() time.Duration { return e.built }

// StartDaemon runs dockerd and waits until it answers.
func (e *Engine) StartDaemon(liveRestore bool) {
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
		"--host", e.Host(),
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
	dockerd := "dockerd"
	if e.opts.Current {
		if e.ctrd == nil {
			e.startContainerd()
		}
		dockerd = e.bins.Dockerd
		// Published ports through docker-proxy in the engine's network
		// namespace, since the engine writes no iptables rules: a port
		// on the namespace's 127.0.0.1 reaches the container, as on a
		// machine's engine. (The flags win over the earlier
		// --userland-proxy=false.)
		args = append(args, "--containerd", e.containerdSock(), "--userland-proxy=true", "--userland-proxy-path", e.bins.Proxy)
	}
	if e.opts.Args != nil {
		args = append(args, e.opts.Args(e)...)
	}
	cmd := exec.Command("nsenter", append([]string{"--net=" + e.NetNS(), dockerd}, args...)...)
	if e.opts.Current {
		cmd.Env = e.currentEnv()
	}
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
	c, err := dockerapi.New(e.Host())
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	if err := suite.Poll("the private dockerd to answer", 60*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Ping(ctx)
		cancel()
		if err == nil {
			return true, ""
		}
		select {
		case <-exited:
			e.t.Fatalf("private dockerd exited at start: %v\n%s", cmd.ProcessState, e.Log())
		default:
		}
		return false, err.Error()
	}); err != nil {
		e.t.Fatalf("%v\n%s", err, e.Log())
	}
}

// Log is the current (or last) run's dockerd log.
func (e *Engine) Log() string {
	b, _ := os.ReadFile(filepath.Join(e.dir, fmt.Sprintf("dockerd.%d.log", e.starts)))
	return string(b)
}

// Stop ends dockerd with SIGTERM, as `systemctl restart docker` does.
func (e *Engine) Stop() {
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
func (e *Engine) destroy() {
	if e.cmd != nil {
		eng := suite.NewEngine(e.t, e.Host())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		list, _ := eng.ContainerList(ctx)
		for _, c := range list {
			_ = eng.ContainerRemove(ctx, c.ID)
		}
		for _, n := range e.networks(ctx) {
			_ = eng.NetworkRemove(ctx, n)
		}
		cancel()
		e.Stop()
	}
	e.stopContainerd()
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
func (e *Engine) networks(ctx context.Context) []string {
	out, _ := exec.CommandContext(ctx, "docker", "-H", e.Host(), "network", "ls", "--format", "{{.Name}}").Output()
	var names []string
	for _, n := range strings.Fields(string(out)) {
		if n != "bridge" && n != "host" && n != "none" {
			names = append(names, n)
		}
	}
	return names
}
