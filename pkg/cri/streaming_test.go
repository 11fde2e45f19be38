package cri_test

// Exec, Attach and PortForward end to end: the RPCs over real gRPC, and the
// URLs they return used by the real streaming clients (client-go's SPDY
// remotecommand executor and port forwarder, as kubectl and crictl use
// them) against containers on the real engine.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/test/forward"
	"github.com/cri-compose/cri-compose/test/suite"
)

// streamBuf is an output stream the test reads while the client writes.
type streamBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *streamBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *streamBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// streamSizes is a terminal whose size the test changes.
type streamSizes chan remotecommand.TerminalSize

func (q streamSizes) Next() *remotecommand.TerminalSize {
	sz, ok := <-q
	if !ok {
		return nil
	}
	return &sz
}

// streamRun runs a remotecommand session (exec or attach) on rawURL with
// the SPDY executor, as crictl and kubelet's proxy do.
func streamRun(ctx context.Context, t *testing.T, rawURL string, opts remotecommand.StreamOptions) error {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("streaming URL %q: %v", rawURL, err)
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		t.Fatalf("SPDY executor: %v", err)
	}
	return ex.StreamWithContext(ctx, opts)
}

// streamExitCode is the exit code a session's error carries (-1: none).
func streamExitCode(err error) int {
	var ee utilexec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitStatus()
	}
	return -1
}

// streamAsync runs a session in the background; the channel gets its end.
func streamAsync(ctx context.Context, t *testing.T, rawURL string, opts remotecommand.StreamOptions) <-chan error {
	done := make(chan error, 1)
	go func() { done <- streamRun(ctx, t, rawURL, opts) }()
	return done
}

// streamWait waits for a background session to end.
func streamWait(t *testing.T, done <-chan error, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("streaming session still running after %v", timeout)
		return nil
	}
}

// streamPod runs a pod with one busybox container running script.
func (e *criEnv) streamPod(name, script string, edit func(*runtime.ContainerConfig)) (podID, ctrID string) {
	e.t.Helper()
	pod := e.podConfig(name)
	podID = e.runPod(pod)
	cfg := ctrConfig(name, script)
	if edit != nil {
		edit(cfg)
	}
	ctrID = e.runCtr(podID, pod, cfg)
	e.waitCtrState(ctrID, runtime.ContainerState_CONTAINER_RUNNING, 20*time.Second)
	return podID, ctrID
}

func (e *criEnv) execURL(r *runtime.ExecRequest) string {
	e.t.Helper()
	resp, err := e.rt().Exec(e.ctx(), r)
	if err != nil {
		e.t.Fatalf("Exec %v: %v", r.GetCmd(), err)
	}
	return resp.GetUrl()
}

// TestStreamExec runs commands through Exec URLs: output on both streams
// and the exit code, stdin to EOF, and a URL that works only once.
func TestStreamExec(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	_, ctrID := e.streamPod("exec", "sleep 3600", nil)

	base, err := e.server().Srv.StreamURL()
	if err != nil || !strings.HasPrefix(base, "http://127.0.0.1:") || strings.HasSuffix(base, ":0") {
		t.Fatalf("StreamURL = %q, %v; want http://127.0.0.1:<a real port>", base, err)
	}

	// Exit code and both streams, demultiplexed.
	u := e.execURL(&runtime.ExecRequest{ContainerId: ctrID,
		Cmd: []string{"sh", "-c", "echo hi; echo err >&2; exit 5"}, Stdout: true, Stderr: true})
	if !strings.HasPrefix(u, base+"/exec/") {
		t.Errorf("exec URL %q is not under %s/exec/", u, base)
	}
	var stdout, stderr streamBuf
	err = streamRun(e.ctx(), t, u, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if code := streamExitCode(err); code != 5 {
		t.Errorf("exec error %v (exit code %d), want exit code 5", err, code)
	}
	if stdout.String() != "hi\n" || stderr.String() != "err\n" {
		t.Errorf("stdout %q stderr %q, want %q %q", stdout.String(), stderr.String(), "hi\n", "err\n")
	}

	// The URL was used: it is gone.
	err = streamRun(e.ctx(), t, u, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
	if err == nil || streamExitCode(err) != -1 || !strings.Contains(err.Error(), "404") {
		t.Errorf("second use of an exec URL: %v, want a 404 refusal", err)
	}

	// Stdin to EOF, exit 0; a container id prefix works as with crictl.
	u = e.execURL(&runtime.ExecRequest{ContainerId: ctrID[:12],
		Cmd: []string{"sh", "-c", "tr a-z A-Z; echo done"}, Stdin: true, Stdout: true})
	stdout = streamBuf{}
	err = streamRun(e.ctx(), t, u, remotecommand.StreamOptions{Stdin: strings.NewReader("abc\nxyz\n"), Stdout: &stdout})
	if err != nil || stdout.String() != "ABC\nXYZ\ndone\n" {
		t.Errorf("exec with stdin: %v, stdout %q", err, stdout.String())
	}
}

// TestStreamExecTTY runs a shell on a terminal and resizes it twice.
func TestStreamExecTTY(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	_, ctrID := e.streamPod("exectty", "sleep 3600", nil)

	u := e.execURL(&runtime.ExecRequest{ContainerId: ctrID, Tty: true, Stdin: true, Stdout: true,
		Cmd: []string{"sh", "-c", `while read c; do [ "$c" = q ] && exit 7; stty size; done`}})
	sizes := make(streamSizes, 1)
	defer close(sizes)
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var out streamBuf
	done := streamAsync(e.ctx(), t, u, remotecommand.StreamOptions{
		Stdin: stdinR, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})

	for _, sz := range []remotecommand.TerminalSize{{Width: 100, Height: 30}, {Width: 132, Height: 43}} {
		sizes <- sz
		want := fmt.Sprintf("%d %d", sz.Height, sz.Width)
		suite.Eventually(t, "stty size "+want, 20*time.Second, func() (bool, string) {
			if _, err := stdinW.Write([]byte("\n")); err != nil {
				return false, err.Error()
			}
			return strings.Contains(out.String(), want), out.String()
		})
	}
	if _, err := stdinW.Write([]byte("q\n")); err != nil {
		t.Fatal(err)
	}
	if err := streamWait(t, done, 20*time.Second); streamExitCode(err) != 7 {
		t.Errorf("tty exec ended with %v, want exit code 7", err)
	}
}

// TestStreamAttach attaches to containers' stdio: one that echoes its
// stdin (no TTY: output demultiplexed), one on a terminal (resized).
func TestStreamAttach(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)

	t.Run("stdin", func(t *testing.T) {
		_, ctrID := e.streamPod("attach", `while read l; do echo "got $l"; echo "err $l" >&2; done`,
			func(c *runtime.ContainerConfig) { c.Stdin = true })
		resp, err := e.rt().Attach(e.ctx(), &runtime.AttachRequest{ContainerId: ctrID, Stdin: true, Stdout: true, Stderr: true})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		stdinR, stdinW := io.Pipe()
		var stdout, stderr streamBuf
		done := streamAsync(e.ctx(), t, resp.GetUrl(), remotecommand.StreamOptions{Stdin: stdinR, Stdout: &stdout, Stderr: &stderr})
		if _, err := stdinW.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		suite.Eventually(t, "echo through attach", 20*time.Second, func() (bool, string) {
			return stdout.String() == "got hello\n" && stderr.String() == "err hello\n",
				fmt.Sprintf("stdout %q stderr %q", stdout.String(), stderr.String())
		})
		// Closing stdin ends the attach (the container goes on).
		stdinW.Close()
		if err := streamWait(t, done, 20*time.Second); err != nil {
			t.Errorf("attach ended with %v", err)
		}
		if st := e.ctrStatus(ctrID); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
			t.Errorf("container %s after detaching, want running", st.GetState())
		}
	})

	t.Run("tty", func(t *testing.T) {
		_, ctrID := e.streamPod("attachtty", `while read c; do stty size; done`,
			func(c *runtime.ContainerConfig) { c.Stdin, c.Tty = true, true })
		resp, err := e.rt().Attach(e.ctx(), &runtime.AttachRequest{ContainerId: ctrID, Stdin: true, Stdout: true, Tty: true})
		if err != nil {
			t.Fatalf("Attach: %v", err)
		}
		sizes := make(streamSizes, 1)
		defer close(sizes)
		stdinR, stdinW := io.Pipe()
		var out streamBuf
		done := streamAsync(e.ctx(), t, resp.GetUrl(), remotecommand.StreamOptions{
			Stdin: stdinR, Stdout: &out, Tty: true, TerminalSizeQueue: sizes})
		sizes <- remotecommand.TerminalSize{Width: 91, Height: 27}
		suite.Eventually(t, "stty size 27 91", 20*time.Second, func() (bool, string) {
			if _, err := stdinW.Write([]byte("\n")); err != nil {
				return false, err.Error()
			}
			return strings.Contains(out.String(), "27 91"), out.String()
		})
		stdinW.Close()
		if err := streamWait(t, done, 20*time.Second); err != nil {
			t.Errorf("tty attach ended with %v", err)
		}
	})
}

// TestStreamPortForward forwards a local port to a web server in a pod with
// client-go's port forwarder, and checks that a closed port is an error
// that names the port.
func TestStreamPortForward(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	podID, ctrID := e.streamPod("pf",
		`mkdir -p /www && echo hello-pf > /www/index.html && exec httpd -f -p 8080 -h /www`, nil)
	suite.Eventually(t, "httpd in the pod", 20*time.Second, func() (bool, string) {
		resp, err := e.rt().ExecSync(e.ctx(), &runtime.ExecSyncRequest{ContainerId: ctrID, Timeout: 5,
			Cmd: []string{"wget", "-q", "-O", "-", "http://127.0.0.1:8080/index.html"}})
		if err != nil {
			return false, err.Error()
		}
		return string(resp.GetStdout()) == "hello-pf\n", string(resp.GetStderr())
	})

	t.Run("http", func(t *testing.T) {
		fw := e.streamForward(t, podID, 8080)
		for i := range 3 { // each GET is a connection of its own through one session
			code, body, err := fw.Get("/index.html")
			if err != nil || code != http.StatusOK || body != "hello-pf\n" {
				t.Fatalf("GET %d through the forward: %d %q, %v", i, code, body, err)
			}
		}
		fw.Close()
		if err := fw.Wait(t, 20*time.Second); err != nil {
			t.Errorf("ForwardPorts: %v", err)
		}
	})

	t.Run("closed-port", func(t *testing.T) {
		// The error stream says what failed.
		msg := e.streamForwardRaw(t, podID, 8081)
		if !strings.Contains(msg, "8081") || !strings.Contains(msg, "connection refused") {
			t.Errorf("error stream for a closed port: %q, want it to name port 8081 and the refusal", msg)
		}
		// And client-go's forwarder fails the connection and stops. It
		// stops at the first connection whose error stream has a message;
		// but the streaming library resets the data stream along with the
		// error, and when that reset overtakes the stream's reply the
		// client sees only a reset stream, logs it and goes on forwarding
		// (client-go's handleConnection). The next connection then stops
		// it, as a kubectl user would see. So every connection fails, and
		// within a few the forward ends with an error.
		fw := e.streamForward(t, podID, 8081)
		deadline := time.Now().Add(20 * time.Second)
		for n := 1; ; n++ {
			if code, body, err := fw.Get("/index.html"); err == nil && code == http.StatusOK {
				t.Fatalf("GET %d through a forward to a closed port: %q, want an error", n, body)
			}
			ended, err := fw.Ended(2 * time.Second)
			if ended {
				if err == nil {
					t.Errorf("ForwardPorts to a closed port ended without an error")
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("ForwardPorts to a closed port still running after %d connections", n)
			}
		}
		fw.Close()
	})
}

// TestStreamPortForwardHostNetwork forwards to a port of a pod on the
// host's network, which is dialled on loopback.
func TestStreamPortForwardHostNetwork(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	port := 20000 + rand.IntN(20000)
	pod := e.podConfig("pfhost")
	pod.Linux = &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{
		NamespaceOptions: &runtime.NamespaceOption{Network: runtime.NamespaceMode_NODE}}}
	podID := e.runPod(pod)
	cfg := ctrConfig("web", fmt.Sprintf(`mkdir -p /www && echo hello-host > /www/index.html && exec httpd -f -p 127.0.0.1:%d -h /www`, port))
	ctrID := e.runCtr(podID, pod, cfg)
	suite.Eventually(t, "httpd on the host's loopback", 20*time.Second, func() (bool, string) {
		resp, err := e.rt().ExecSync(e.ctx(), &runtime.ExecSyncRequest{ContainerId: ctrID, Timeout: 5,
			Cmd: []string{"wget", "-q", "-O", "-", fmt.Sprintf("http://127.0.0.1:%d/index.html", port)}})
		if err != nil {
			return false, err.Error()
		}
		return string(resp.GetStdout()) == "hello-host\n", string(resp.GetStderr())
	})
	fw := e.streamForward(t, podID, int32(port))
	if code, body, err := fw.Get("/index.html"); err != nil || code != http.StatusOK || body != "hello-host\n" {
		t.Errorf("GET through the forward: %d %q, %v", code, body, err)
	}
	fw.Close()
	if err := fw.Wait(t, 20*time.Second); err != nil {
		t.Errorf("ForwardPorts: %v", err)
	}
}

// streamForward asks for a PortForward URL and forwards a free local port
// to port with client-go's forwarder (test/forward).
func (e *criEnv) streamForward(t *testing.T, podID string, port int32) *forward.Forward {
	t.Helper()
	d, err := forward.Dialer(&rest.Config{}, e.streamPFURL(t, podID, port))
	if err != nil {
		t.Fatal(err)
	}
	return forward.Start(t, d, int(port), 20*time.Second)
}

// streamPFURL is the PortForward URL of port of the pod.
func (e *criEnv) streamPFURL(t *testing.T, podID string, port int32) string {
	t.Helper()
	resp, err := e.rt().PortForward(e.ctx(), &runtime.PortForwardRequest{PodSandboxId: podID, Port: []int32{port}})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	return resp.GetUrl()
}

// streamForwardRaw opens one forwarded connection to port by hand, as the
// port-forward protocol does (an error stream and a data stream), and
// returns what the server wrote on the error stream.
func (e *criEnv) streamForwardRaw(t *testing.T, podID string, port int32) string {
	t.Helper()
	d, err := forward.Dialer(&rest.Config{}, e.streamPFURL(t, podID, port))
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := d.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		t.Fatalf("dial the port-forward URL: %v", err)
	}
	defer conn.Close()
	// Header names and values of the protocol (k8s.io/api/core/v1).
	h := http.Header{}
	h.Set("streamType", "error")
	h.Set("port", strconv.Itoa(int(port)))
	h.Set("requestID", "0")
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.Fatalf("error stream: %v", err)
	}
	errStream.Close()
	h.Set("streamType", "data")
	// The server may reset the data stream (it failed) before it is
	// even acknowledged; the error stream still has the message.
	if data, err := conn.CreateStream(h); err == nil {
		defer data.Close()
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(errStream)
		got <- b
	}()
	select {
	case b := <-got:
		return string(b)
	case <-time.After(20 * time.Second):
		t.Fatal("no answer on the error stream after 20s")
		return ""
	}
}

// TestStreamStopEndsSessions stops the server under a running exec: the
// session ends and its process is killed.
func TestStreamStopEndsSessions(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	_, ctrID := e.streamPod("stop", "sleep 3600", nil)
	u := e.execURL(&runtime.ExecRequest{ContainerId: ctrID, Cmd: []string{"sleep", "4242"}, Stdout: true})
	done := streamAsync(e.ctx(), t, u, remotecommand.StreamOptions{Stdout: io.Discard})
	ps := func() (bool, string) {
		resp, err := e.rt().ExecSync(e.ctx(), &runtime.ExecSyncRequest{ContainerId: ctrID, Cmd: []string{"ps", "-o", "args"}, Timeout: 10})
		if err != nil {
			return false, err.Error()
		}
		return true, string(resp.GetStdout())
	}
	suite.Eventually(t, "the exec'd sleep", 20*time.Second, func() (bool, string) {
		ok, out := ps()
		return ok && strings.Contains(out, "sleep 4242"), out
	})
	e.restart(nil)
	if err := streamWait(t, done, 20*time.Second); err == nil {
		t.Errorf("exec session ended without an error when the server stopped")
	}
	// The new server knows the container once it has read the engine.
	suite.Eventually(t, "the exec'd sleep to be killed", 20*time.Second, func() (bool, string) {
		ok, out := ps()
		return ok && !strings.Contains(out, "sleep 4242"), out
	})
}

// TestStreamBadRequests checks the codes of streaming RPCs that cannot be
// served.
func TestStreamBadRequests(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("streambad")
	podID := e.runPod(pod)
	running := e.runCtr(podID, pod, ctrConfig("running", "sleep 3600"))
	exited := e.runCtr(podID, pod, ctrConfig("exited", "true"))
	e.waitCtrState(running, runtime.ContainerState_CONTAINER_RUNNING, 20*time.Second)
	e.waitCtrState(exited, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)
	missing := "missing" + randHex(8)
	sh := []string{"sh"}
	rt := e.rt()

	_, err := rt.Exec(e.ctx(), &runtime.ExecRequest{ContainerId: missing, Cmd: sh, Stdout: true})
	wantCode(t, err, codes.NotFound, missing)
	_, err = rt.Exec(e.ctx(), &runtime.ExecRequest{ContainerId: exited, Cmd: sh, Stdout: true})
	wantCode(t, err, codes.FailedPrecondition, exited, "not running")
	_, err = rt.Exec(e.ctx(), &runtime.ExecRequest{ContainerId: running, Stdout: true})
	wantCode(t, err, codes.InvalidArgument, "command")
	_, err = rt.Exec(e.ctx(), &runtime.ExecRequest{ContainerId: running, Cmd: sh})
	wantCode(t, err, codes.InvalidArgument) // no stream at all
	_, err = rt.Exec(e.ctx(), &runtime.ExecRequest{ContainerId: running, Cmd: sh, Tty: true, Stdout: true, Stderr: true})
	wantCode(t, err, codes.InvalidArgument, "tty")

	_, err = rt.Attach(e.ctx(), &runtime.AttachRequest{ContainerId: missing, Stdout: true})
	wantCode(t, err, codes.NotFound, missing)
	_, err = rt.Attach(e.ctx(), &runtime.AttachRequest{ContainerId: exited, Stdout: true})
	wantCode(t, err, codes.FailedPrecondition, exited, "not running")

	_, err = rt.PortForward(e.ctx(), &runtime.PortForwardRequest{PodSandboxId: missing, Port: []int32{80}})
	wantCode(t, err, codes.NotFound, missing)
	_, err = rt.PortForward(e.ctx(), &runtime.PortForwardRequest{PodSandboxId: podID, Port: []int32{70000}})
	wantCode(t, err, codes.InvalidArgument, "70000")
	if _, err := rt.StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	_, err = rt.PortForward(e.ctx(), &runtime.PortForwardRequest{PodSandboxId: podID, Port: []int32{80}})
	wantCode(t, err, codes.FailedPrecondition, "not ready")
}
