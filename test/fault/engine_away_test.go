package fault

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/test/suite"
)

// engineProxy forwards a unix socket to the engine's, and can be cut: the
// engine is then unreachable for whoever uses the proxy (connection
// refused, open connections reset), as when it stops or its host is away.
// It can also delay what goes to the engine (setLatency): every request
// then reaches it that much later, as with an engine that crawls.
type engineProxy struct {
	path, target string
	latency      atomic.Int64 // ns added to what is sent to the engine

	mu    sync.Mutex
	l     net.Listener
	conns map[net.Conn]struct{}
}

func newEngineProxy(t *testing.T, dir string) *engineProxy {
	t.Helper()
	target := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if !strings.HasPrefix(h, "unix://") {
			t.Skipf("the engine proxy forwards unix sockets only; DOCKER_HOST=%s", h)
		}
		target = strings.TrimPrefix(h, "unix://")
	}
	p := &engineProxy{path: filepath.Join(dir, "engine.sock"), target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(p.cut)
	return p
}

func (p *engineProxy) host() string { return "unix://" + p.path }

// serve starts forwarding.
func (p *engineProxy) serve(t *testing.T) {
	t.Helper()
	l, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.l = l
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *engineProxy) forward(c net.Conn) {
	up, err := net.Dial("unix", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.l == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { p.delayed(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// setLatency delays by d everything sent to the engine from now on.
func (p *engineProxy) setLatency(d time.Duration) { p.latency.Store(int64(d)) }

// delayed copies src to dst, each read reaching dst the latency after it
// was read: a delay line, not a throttle (what is read meanwhile is not
// held back further), and what was sent before the sender went still
// arrives, as on a slow link.
func (p *engineProxy) delayed(dst io.Writer, src io.Reader) {
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 64)
	go func() {
		defer close(chunks)
		for {
			b := make([]byte, 32*1024)
			n, err := src.Read(b)
			if n > 0 {
				chunks <- chunk{b[:n], time.Now().Add(time.Duration(p.latency.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		time.Sleep(time.Until(ch.at))
		if _, err := dst.Write(ch.b); err != nil {
			for range chunks { // until the reader sees its end
			}
			return
		}
	}
}

// cut stops listening (the socket file goes) and drops every connection.
func (p *engineProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		p.l.Close()
		p.l = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// TestEngineAway: the engine cannot be reached for a while, then can
// again. Meanwhile requests that need it answer Unavailable (kubelet
// retries those), Status reports the runtime not ready, and the lists
// answer from memory. Afterwards the same process (no restart) is ready
// again, by itself, and reports what changed on the engine meanwhile.
func TestEngineAway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if len(dir) > 80 {
		dir, _ = os.MkdirTemp("", "ccaway-")
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	p := newEngineProxy(t, dir)
	p.serve(t)
	k := newKube(t, "", suite.DaemonConfig{DockerHost: p.host()})
	k.d.Start()
	pid := k.d.Pid()
	id, ctrs := k.runWith(k.podConfig("web", 0), "app", "victim")
	app, victim := ctrs[0], ctrs[1]
	suite.WaitCRILog(t, filepath.Join(k.pods[id].GetLogDirectory(), "app", "0.log"), "started app", 15*time.Second)

	p.cut()
	cutAt := time.Now()
	k.d.WaitReadyIs(false, 10*time.Second)
	t.Logf("Status reported not ready %v after the engine went away", time.Since(cutAt).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(k.ctx, 30*time.Second)
	defer cancel()
	wantUnavailable := func(what string, err error) {
		t.Helper()
		if c := status.Code(err); c != codes.Unavailable {
			t.Errorf("%s while the engine is away: %v (%v), want Unavailable", what, c, err)
		}
	}
	_, err := k.d.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: k.podConfig("new", 0)})
	wantUnavailable("RunPodSandbox", err)
	_, err = k.d.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: id, Config: ctrConfig("more", 0), SandboxConfig: k.pods[id]})
	wantUnavailable("CreateContainer", err)
	_, err = k.d.RT.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: app})
	wantUnavailable("StopContainer", err)
	_, err = k.d.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: id})
	wantUnavailable("StopPodSandbox", err)
	_, err = k.d.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: id})
	wantUnavailable("RemovePodSandbox", err)
	// The lists answer from memory: kubelet must not think pods are gone.
	if pods := k.listPods(); len(pods) != 1 || pods[0].GetId() != id {
		t.Errorf("ListPodSandbox while the engine is away: %v, want the pod", pods)
	}
	// Behind cri-compose's back, while it cannot see: the victim dies.
	if err := k.eng.ContainerKill(ctx, victim, "KILL"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // away for a while: the event stream backs off
	if ok, why := k.d.Ready(); ok {
		t.Errorf("Status says ready while the engine is still away (%s)", why)
	}

	p.serve(t)
	backAt := time.Now()
	k.d.WaitReadyIs(true, 20*time.Second)
	t.Logf("Status reported ready %v after the engine came back", time.Since(backAt).Round(time.Millisecond))
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}
	waitState(t, k, victim, runtime.ContainerState_CONTAINER_EXITED, 10*time.Second)
	if st := ctrState(k, app); st != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("app after the engine came back: %v, want RUNNING", st)
	}
	if st := podState(k, id); st != runtime.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod after the engine came back: %v, want READY", st)
	}
	id2, ctrs2 := k.runWith(k.podConfig("new", 0), "app")
	k.expect("after the engine came back", map[string][]string{id: ctrs, id2: ctrs2})
	k.teardown()
}

// waitState polls ContainerStatus until the container is in state.
func waitState(t *testing.T, k *kube, id string, state runtime.ContainerState, timeout time.Duration) {
	t.Helper()
	suite.Eventually(t, fmt.Sprintf("container %s to be %v", id[:12], state), timeout, func() (bool, string) {
		st := ctrState(k, id)
		return st == state, st.String()
	})
}
