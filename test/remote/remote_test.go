// Package remote tests cri-compose against a Docker engine on "another
// host", with real parts on one machine: a private engine in
// its own network namespace (so its pod network is not reachable from
// here, as on a real remote host), reached over ssh:// through Debian's
// sshd on 127.0.0.1 and over tcp:// with mutual TLS on a veth link, by the
// built cri-compose binary, which stages host-path mounts (--stage-mounts
// auto) and forwards ports through the engine.
//
// `make test-remote` runs it (about two minutes; root, dockerd, ip,
// nsenter and /usr/sbin/sshd needed, else skipped, or failed under CI).
package remote

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/rest"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/forward"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/sshhost"
	"github.com/cri-compose/cri-compose/test/suite"
)

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// image is the busybox image the pods run, loaded into the private engine.
const image = "localhost/cri-compose/test-busybox:remote"

// kube drives one cri-compose over one endpoint, as kubelet would.
type kube struct {
	t   testing.TB
	h   *host
	d   *suite.Daemon
	eng *suite.Engine // the private engine over its socket, to check it
	ctx context.Context
	ns  string
}

var nsSeq struct {
	sync.Mutex
	n int
}

// newKube starts cri-compose on endpoint (with args) against h's engine.
func newKube(t testing.TB, h *host, endpoint string, args ...string) *kube {
	t.Helper()
	eng := suite.NewEngine(t, h.pe.Host())
	images.NeedBusybox(t, eng.Client, image)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	nsSeq.Lock()
	nsSeq.n++
	ns := fmt.Sprintf("remote-%s-%d", suite.RunID(), nsSeq.n)
	nsSeq.Unlock()
	// One pod network for every run on this engine (one subnet); the
	// engine goes at the end of the test with everything in it.
	network := "ccr-" + suite.RunID()
	t.Cleanup(func() {
		defer cancel()
		if left := eng.Sweep(ns, ""); len(left) > 0 {
			t.Logf("cleanup removed containers the test left: %v", left)
		}
	})
	d := suite.NewDaemon(t, suite.DaemonConfig{DockerHost: endpoint, Network: network, NetworkSubnet: h.pe.Subnet(), Args: args})
	d.Start()
	return &kube{t: t, h: h, d: d, eng: eng, ctx: ctx, ns: ns}
}

func sshArgs(h *host) []string { return h.sshd.ClientArgs() }

// TestRemote runs the remote-host scenario over tcp+TLS and over ssh, then
// the faults over ssh: the tunnel dropped, the engine stopped.
func TestRemote(t *testing.T) {
	h := newHost(t)
	t.Run("refusals", func(t *testing.T) { refusals(t, h) })
	t.Run("streams", func(t *testing.T) { manyStreams(t, h) })
	t.Run("agent", func(t *testing.T) { agentAuth(t, h) })
	t.Run("tls", func(t *testing.T) {
		k := newKube(t, h, h.tlsURL, "--docker-cert-path", h.clientDir)
		k.scenario()
	})
	t.Run("ssh", func(t *testing.T) {
		k := newKube(t, h, h.sshURL, sshArgs(h)...)
		k.scenario()
		k.tunnelDrop()
		k.tunnelHang()
		k.engineAway()
		k.sweptAfterRestart()
	})
}

// scenario: a pod with a staged folder and file mount, its log, exec, an
// update of the folder seen in the pod, a port-forward to busybox httpd,
// and the staged volumes gone with the pod.
func (k *kube) scenario() {
	t := k.t
	start := time.Now()
	src := t.TempDir()
	cfgDir := filepath.Join(src, "config") // as vk-cri writes a configMap volume
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(cfgDir, "greeting"), "hello")
	one := filepath.Join(src, "one.txt")
	writeAtomic(t, one, "one")

	st, err := k.d.RT.Status(k.ctx, &runtime.StatusRequest{Verbose: true})
	if err != nil || !strings.Contains(st.GetInfo()["config"], `"stageMounts":true`) {
		t.Errorf("verbose Status: %v (%v), want stageMounts true (--stage-mounts=auto on a remote endpoint)", st.GetInfo(), err)
	}

	pod := k.podConfig("web")
	id := k.run(pod)
	ctr := &runtime.ContainerConfig{
		Metadata: &runtime.ContainerMetadata{Name: "web"},
		Image:    &runtime.ImageSpec{Image: image},
		Command:  []string{"sh", "-c", "echo started web; mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 8080 -h /www"},
		LogPath:  "web/0.log",
		Mounts: []*runtime.Mount{
			{ContainerPath: "/etc/cfg", HostPath: cfgDir, Readonly: true},
			{ContainerPath: "/etc/one.txt", HostPath: one, Readonly: true},
		},
	}
	c := k.create(id, pod, ctr)
	k.start(c)
	suite.WaitCRILog(t, filepath.Join(pod.GetLogDirectory(), "web", "0.log"), "stdout F started web", 20*time.Second)
	if got := k.exec(c, "cat", "/etc/cfg/greeting"); got != "hello" {
		t.Errorf("staged folder: /etc/cfg/greeting holds %q, want hello", got)
	}
	if got := k.exec(c, "cat", "/etc/one.txt"); got != "one" {
		t.Errorf("staged file: /etc/one.txt holds %q, want one", got)
	}
	writeAtomic(t, filepath.Join(cfgDir, "greeting"), "bye")
	k.waitExec(c, "bye", 20*time.Second, "cat", "/etc/cfg/greeting")

	if got := k.forwardGet(id, 8080); got != "hello-from-pod\n" {
		t.Errorf("GET through port-forward: %q, want hello-from-pod", got)
	}

	project := sandbox.ProjectName(pod.GetMetadata())
	vols, err := k.eng.VolumeList(k.ctx, "io.cri-compose.stage.project="+project)
	if err != nil || len(vols) != 1 {
		t.Errorf("staged volumes of %s: %v (%v), want one (the folder)", project, vols, err)
	}
	k.removePod(id)
	if vols, err := k.eng.VolumeList(k.ctx, "io.cri-compose.stage.project="+project); err != nil || len(vols) != 0 {
		t.Errorf("staged volumes after RemovePodSandbox: %v (%v), want none", vols, err)
	}
	if list, _ := k.eng.ContainerList(k.ctx, "io.cri-compose.stage.helper"); len(list) != 0 {
		t.Errorf("staging containers left: %d", len(list))
	}
	t.Logf("scenario over %s: %v", k.d.Cfg.DockerHost, time.Since(start).Round(time.Millisecond))
}

// tunnelDrop kills sshd and its connections: cri-compose reports the
// runtime not ready and answers Unavailable; sshd back, it reconnects by
// itself and the running pod is reachable again.
func (k *kube) tunnelDrop() {
	t := k.t
	pod := k.podConfig("drop")
	id := k.run(pod)
	c := k.create(id, pod, sleeper("app"))
	k.start(c)
	pid := k.d.Pid()

	t0 := time.Now()
	k.h.sshd.Stop()
	k.d.WaitReadyIs(false, 30*time.Second)
	t.Logf("tunnel dropped: not ready after %v", time.Since(t0).Round(time.Millisecond))
	_, err := k.d.RT.RunPodSandbox(k.ctx, &runtime.RunPodSandboxRequest{Config: k.podConfig("never")})
	if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("RunPodSandbox without the tunnel: %v (%v), want Unavailable", code, err)
	}
	_, err = k.d.RT.ExecSync(k.ctx, &runtime.ExecSyncRequest{ContainerId: c, Cmd: []string{"true"}, Timeout: 10})
	if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("ExecSync without the tunnel: %v (%v), want Unavailable", code, err)
	}
	t1 := time.Now()
	k.h.sshd.Start()
	k.d.WaitReadyIs(true, 30*time.Second)
	t.Logf("tunnel back: ready after %v", time.Since(t1).Round(time.Millisecond))
	if got := k.exec(c, "echo", "again"); got != "again" {
		t.Errorf("exec after the tunnel came back: %q", got)
	}
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}
	k.removePod(id)
}

// tunnelHang freezes the SSH connection (its sshd processes stopped, the
// TCP connection open and silent, as when the network drops packets).
// Nothing fails on its own then: the event stream just hears nothing. The
// keepalive gives up on the connection, which fails the streams on it,
// and the next call makes a new one: exec works again while the old
// connection still hangs, without a restart.
func (k *kube) tunnelHang() {
	t := k.t
	pod := k.podConfig("hang")
	id := k.run(pod)
	c := k.create(id, pod, sleeper("app"))
	k.start(c)
	pid := k.d.Pid()
	conns := sshhost.Descendants(k.h.sshd.Pid())
	if len(conns) == 0 {
		t.Fatal("sshd has no connection process to freeze")
	}
	for _, p := range conns {
		_ = syscall.Kill(p, syscall.SIGSTOP)
	}
	defer func() {
		for _, p := range conns {
			_ = syscall.Kill(p, syscall.SIGCONT)
		}
	}()
	t0 := time.Now()
	deadline := t0.Add(45 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(k.ctx, 5*time.Second)
		r, err := k.d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: c, Cmd: []string{"echo", "unfrozen"}, Timeout: 4})
		cancel()
		if err == nil && strings.TrimSpace(string(r.GetStdout())) == "unfrozen" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec still fails %v after the connection froze: %v\n%s", time.Since(t0), err, k.d.LogTail(20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("tunnel hung: exec works again over a new connection %v after the freeze", time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(k.d.Log(), "keepalive unanswered") {
		t.Errorf("cri-compose's log does not say the keepalive gave up on the frozen connection")
	}
	k.d.WaitReadyIs(true, 30*time.Second)
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}
	k.removePod(id)
}

// engineAway stops the private engine: not ready and Unavailable; started
// again, cri-compose recovers without a restart and runs a new pod.
func (k *kube) engineAway() {
	t := k.t
	pid := k.d.Pid()
	k.h.pe.Stop()
	k.d.WaitReadyIs(false, 30*time.Second)
	_, err := k.d.RT.RunPodSandbox(k.ctx, &runtime.RunPodSandboxRequest{Config: k.podConfig("never2")})
	if code := status.Code(err); code != codes.Unavailable {
		t.Errorf("RunPodSandbox with the engine stopped: %v (%v), want Unavailable", code, err)
	}
	t0 := time.Now()
	k.h.pe.StartDaemon(false)
	k.d.WaitReadyIs(true, 60*time.Second)
	t.Logf("engine back: ready after %v", time.Since(t0).Round(time.Millisecond))
	pod := k.podConfig("after")
	id := k.run(pod)
	c := k.create(id, pod, sleeper("app"))
	k.start(c)
	if got := k.exec(c, "echo", "back"); got != "back" {
		t.Errorf("exec in a pod made after the engine came back: %q", got)
	}
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}
	k.removePod(id)
}

// sweptAfterRestart: a pod with a staged folder is removed from the
// engine while cri-compose is down; after its restart its staged volume
// is removed too.
func (k *kube) sweptAfterRestart() {
	t := k.t
	cfgDir := filepath.Join(t.TempDir(), "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(cfgDir, "greeting"), "hello")
	pod := k.podConfig("gone")
	id := k.run(pod)
	ctr := sleeper("app")
	ctr.Mounts = []*runtime.Mount{{ContainerPath: "/etc/cfg", HostPath: cfgDir, Readonly: true}}
	k.create(id, pod, ctr)
	label := "io.cri-compose.stage.project=" + sandbox.ProjectName(pod.GetMetadata())
	if vols, err := k.eng.VolumeList(k.ctx, label); err != nil || len(vols) != 1 {
		t.Fatalf("staged volumes: %v (%v), want one", vols, err)
	}
	k.d.Stop(syscall.SIGKILL)
	if left := k.eng.Sweep(k.ns, ""); len(left) == 0 {
		t.Fatal("no container of the pod to remove behind cri-compose's back")
	}
	k.d.Start()
	suite.Eventually(t, "no staged volumes of a pod removed while cri-compose was down, after its restart", 20*time.Second, func() (bool, string) {
		vols, err := k.eng.VolumeList(k.ctx, label)
		return err == nil && len(vols) == 0, fmt.Sprintf("%v (%v)", vols, err)
	})
}

func sleeper(name string) *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata: &runtime.ContainerMetadata{Name: name},
		Image:    &runtime.ImageSpec{Image: image},
		Command:  []string{"sh", "-c", "echo started " + name + "; exec sleep 3600"},
		LogPath:  name + "/0.log",
	}
}

// writeAtomic replaces path's content by a rename, as kubelet's and
// vk-cri's atomic writer do.
func writeAtomic(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (k *kube) podConfig(name string) *runtime.PodSandboxConfig {
	logDir := filepath.Join(k.d.LogDir, k.ns+"_"+name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		k.t.Fatal(err)
	}
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: k.ns, Uid: "uid-" + k.ns + "-" + name},
		Hostname:     name,
		LogDirectory: logDir,
		DnsConfig:    &runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"svc.cluster.local"}, Options: []string{"ndots:5"}},
	}
}

func (k *kube) run(pod *runtime.PodSandboxConfig) string {
	k.t.Helper()
	r, err := k.d.RT.RunPodSandbox(k.ctx, &runtime.RunPodSandboxRequest{Config: pod})
	if err != nil {
		k.t.Fatalf("RunPodSandbox %s: %v\n%s", pod.GetMetadata().GetName(), err, k.d.LogTail(30))
	}
	return r.GetPodSandboxId()
}

func (k *kube) create(podID string, pod *runtime.PodSandboxConfig, ctr *runtime.ContainerConfig) string {
	k.t.Helper()
	r, err := k.d.RT.CreateContainer(k.ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctr, SandboxConfig: pod})
	if err != nil {
		k.t.Fatalf("CreateContainer %s: %v\n%s", ctr.GetMetadata().GetName(), err, k.d.LogTail(30))
	}
	return r.GetContainerId()
}

func (k *kube) start(id string) {
	k.t.Helper()
	if _, err := k.d.RT.StartContainer(k.ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		k.t.Fatalf("StartContainer %s: %v\n%s", id, err, k.d.LogTail(30))
	}
}

func (k *kube) removePod(id string) {
	k.t.Helper()
	if _, err := k.d.RT.StopPodSandbox(k.ctx, &runtime.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		k.t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := k.d.RT.RemovePodSandbox(k.ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		k.t.Fatalf("RemovePodSandbox: %v", err)
	}
}

// exec runs cmd in the container and returns its trimmed stdout.
func (k *kube) exec(id string, cmd ...string) string {
	k.t.Helper()
	r, err := k.d.RT.ExecSync(k.ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 20})
	if err != nil {
		k.t.Fatalf("ExecSync %v: %v", cmd, err)
	}
	if r.GetExitCode() != 0 {
		k.t.Errorf("ExecSync %v: exit %d, stderr %q", cmd, r.GetExitCode(), r.GetStderr())
	}
	return strings.TrimSpace(string(r.GetStdout()))
}

// waitExec runs cmd until its output is want.
func (k *kube) waitExec(id, want string, timeout time.Duration, cmd ...string) {
	k.t.Helper()
	suite.Eventually(k.t, fmt.Sprintf("%v to print %q", cmd, want), timeout, func() (bool, string) {
		got := k.exec(id, cmd...)
		return got == want, fmt.Sprintf("%q", got)
	})
}

// forwardGet forwards a local port to port of the pod with client-go's
// forwarder (as kubectl port-forward does) and GETs /index.html.
func (k *kube) forwardGet(podID string, port int32) string {
	t := k.t
	t.Helper()
	resp, err := k.d.RT.PortForward(k.ctx, &runtime.PortForwardRequest{PodSandboxId: podID, Port: []int32{port}})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	d, err := forward.Dialer(&rest.Config{}, resp.GetUrl())
	if err != nil {
		t.Fatal(err)
	}
	fw := forward.Start(t, d, int(port), 20*time.Second)
	defer func() {
		fw.Close()
		fw.Wait(t, 20*time.Second)
	}()
	// httpd may still be starting: the first GETs can be refused.
	// Only a failed GET is retried; a wrong status fails at once.
	var code int
	var body string
	if err := suite.Poll("a GET through the forward", 15*time.Second, func() (bool, string) {
		var err error
		code, body, err = fw.Get("/index.html")
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	}); err != nil {
		t.Fatalf("GET through the forward: %v\n%s", err, k.d.LogTail(20))
	}
	if code != http.StatusOK {
		t.Fatalf("GET through the forward: %d %q", code, body)
	}
	return body
}
