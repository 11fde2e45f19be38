package cri_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// slowLogs is the real engine whose log fetches each answer delay late, as
// a loaded engine's do: the log pump falls far behind a container that
// writes fast, and the gate holds the container. Its first attach to a
// container fails, so that the container's log is written from the
// engine's log, as after a restart of the server; or, with breakAfter,
// that attach breaks after that long, as at an engine restart.
type slowLogs struct {
	*dockerapi.Client
	delay      time.Duration
	breakAfter time.Duration // 0: the first attach fails

	mu       sync.Mutex
	attached map[string]bool
}

func (e *slowLogs) ContainerAttach(ctx context.Context, id string, o dockerapi.AttachConfig) (*dockerapi.Stream, error) {
	e.mu.Lock()
	first := !e.attached[id]
	if e.attached == nil {
		e.attached = map[string]bool{}
	}
	e.attached[id] = true
	e.mu.Unlock()
	if first && e.breakAfter == 0 {
		return nil, errors.New("attach refused by the test")
	}
	st, err := e.Client.ContainerAttach(ctx, id, o)
	if err == nil && first {
		time.AfterFunc(e.breakAfter, func() { st.Conn.Close() })
	}
	return st, err
}

func (e *slowLogs) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(e.delay):
		return nil
	}
}

func (e *slowLogs) ContainerLogs(ctx context.Context, id string, since time.Time, follow bool) (io.ReadCloser, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.Client.ContainerLogs(ctx, id, since, follow)
}

func (e *slowLogs) ContainerLogTail(ctx context.Context, id string, since time.Time, tail int) (io.ReadCloser, error) {
	if err := e.wait(ctx); err != nil {
		return nil, err
	}
	return e.Client.ContainerLogTail(ctx, id, since, tail)
}

// slowLogPod serves CRI on engine e and runs a pod there for the test,
// named after name, with a log directory.
func slowLogPod(t *testing.T, e *slowLogs, name string) (runtime.RuntimeServiceClient, *runtime.PodSandboxConfig, string) {
	t.Helper()
	srv, stop := cri.NewFakeServer(cri.Config{Network: testNetwork, StateDir: t.TempDir()}, e, e.NewEvents())
	t.Cleanup(stop)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	conn, _, _ := suite.Serve(t, srv.Register)
	rt := runtime.NewRuntimeServiceClient(conn)
	if err := suite.WaitReady(rt, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	name = fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	pod := &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: testNamespace, Uid: name},
		LogDirectory: t.TempDir(),
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	run, err := rt.RunPodSandbox(rctx, &runtime.RunPodSandboxRequest{Config: pod})
	if err != nil {
		t.Fatal(err)
	}
	podID := run.GetPodSandboxId()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: podID})
		_, _ = rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: podID})
	})
	return rt, pod, podID
}

// TestLogCompleteBehindSlowPump: a container whose log is written from the
// engine's log (its attach before the start failed) writes 10 MB as fast as it can
// and exits while its log pump, whose every fetch takes a second, is far
// behind and the gate holds the container. The engine gives a process's
// output only 2 s to drain once the process exits, so the gate must let go
// at the exit, or the engine drops the end of the output: every line must
// reach the CRI log. (The exit is reported after at most 2 s of waiting
// for the pump, which this slow one may need more than: the test waits for
// the last output.)
func TestLogCompleteBehindSlowPump(t *testing.T) {
	t.Parallel()
	d := images.Engine(t)
	images.NeedBusybox(t, d, testImage)
	rt, pod, podID := slowLogPod(t, &slowLogs{Client: d, delay: time.Second}, "slowpump")
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer rcancel()
	const lines = 100000 // of 108 bytes: 10.8 MB
	script := fmt.Sprintf(`awk 'BEGIN { for (i = 1; i <= %d; i++) printf "%%07d %%0100d\n", i, 0; printf "END" }'`, lines)
	cc, err := rt.CreateContainer(rctx, &runtime.CreateContainerRequest{
		PodSandboxId: podID, Config: ctrConfig("flood", script), SandboxConfig: pod,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := cc.GetContainerId()
	if _, err := rt.StartContainer(rctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	suite.Eventually(t, "the container to exit", 3*time.Minute, func() (bool, string) {
		st, err := rt.ContainerStatus(rctx, &runtime.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return false, err.Error()
		}
		return st.GetStatus().GetState() == runtime.ContainerState_CONTAINER_EXITED, st.GetStatus().GetState().String()
	})
	path := filepath.Join(pod.GetLogDirectory(), "flood.log")
	var recs []crilog.Record
	suite.Eventually(t, "END in the CRI log", 2*time.Minute, func() (bool, string) {
		recs = readLog(t, path)
		if n := len(recs); n > 0 && string(recs[n-1].Content) == "END" {
			return true, ""
		}
		return false, fmt.Sprintf("%d records", len(recs))
	})
	pad := strings.Repeat("0", 100)
	for i, r := range recs {
		want := fmt.Sprintf("%07d %s", i+1, pad)
		if i == lines {
			want = "END"
		}
		if i > lines || string(r.Content) != want || r.Stream != "stdout" || r.Partial != (i == lines) {
			t.Fatalf("record %d of %d: %s %q (partial %v), want stdout %q", i+1, len(recs), r.Stream, r.Content, r.Partial, want)
		}
	}
	if len(recs) != lines+1 {
		t.Fatalf("%d records, want %d lines and END", len(recs), lines)
	}
}

// TestLogAttachBreaks: the attach stream a container's log is written from
// breaks while the container writes (as at an engine restart); the
// engine's log takes over where the stream's records end, and each line of
// each stream is in the CRI log once, in order.
func TestLogAttachBreaks(t *testing.T) {
	t.Parallel()
	d := images.Engine(t)
	images.NeedBusybox(t, d, testImage)
	for _, after := range []time.Duration{150 * time.Millisecond, 400 * time.Millisecond, 900 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			t.Parallel()
			rt, pod, podID := slowLogPod(t, &slowLogs{Client: d, breakAfter: after}, "attachbreak")
			rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer rcancel()
			// About 1.5 s of output on both streams, the break in the middle.
			const lines = 3000
			script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do i=$((i+1)); echo "out $i"; echo "err $i" >&2; [ $((i %% 100)) = 0 ] && usleep 50000; done; echo END`, lines)
			cc, err := rt.CreateContainer(rctx, &runtime.CreateContainerRequest{
				PodSandboxId: podID, Config: ctrConfig("talker", script), SandboxConfig: pod,
			})
			if err != nil {
				t.Fatal(err)
			}
			id := cc.GetContainerId()
			if _, err := rt.StartContainer(rctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(pod.GetLogDirectory(), "talker.log")
			var recs []crilog.Record
			suite.Eventually(t, "END in the CRI log", 2*time.Minute, func() (bool, string) {
				recs = readLog(t, path)
				for _, r := range recs {
					if string(r.Content) == "END" {
						return true, ""
					}
				}
				return false, fmt.Sprintf("%d records", len(recs))
			})
			next := map[crilog.Stream]int{crilog.Stdout: 1, crilog.Stderr: 1}
			prefix := map[crilog.Stream]string{crilog.Stdout: "out", crilog.Stderr: "err"}
			for i, r := range recs {
				if r.Stream == crilog.Stdout && next[r.Stream] > lines {
					if string(r.Content) != "END" || i != len(recs)-1 {
						t.Fatalf("record %d of %d: %s %q after stdout's last line", i+1, len(recs), r.Stream, r.Content)
					}
					continue
				}
				if want := fmt.Sprintf("%s %d", prefix[r.Stream], next[r.Stream]); string(r.Content) != want || r.Partial {
					t.Fatalf("record %d of %d: %s %q, want %q", i+1, len(recs), r.Stream, r.Content, want)
				}
				next[r.Stream]++
			}
			if next[crilog.Stderr] != lines+1 {
				t.Fatalf("stderr ends at line %d of %d", next[crilog.Stderr]-1, lines)
			}
		})
	}
}

// TestLogTTY: a TTY container's output, raw stdout with the terminal's
// line ends, is its CRI log line by line, as the engine logs it; the
// unfinished last line too, tagged P.
func TestLogTTY(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("tty")
	podID := e.runPod(pod)
	cfg := ctrConfig("tty", `echo hello; echo world; printf 'prompt$ '`)
	cfg.Tty = true
	id := e.runCtr(podID, pod, cfg)
	e.waitCtrState(id, runtime.ContainerState_CONTAINER_EXITED, time.Minute)
	// Read whole: a line scanner would drop the '\r' before each '\n'.
	b, err := os.ReadFile(filepath.Join(pod.GetLogDirectory(), "tty.log"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		r, err := crilog.ParseLine([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %v %s", r.Stream, r.Partial, r.Content))
	}
	if got, want := strings.Join(got, "|"), "stdout false hello\r|stdout false world\r|stdout true prompt$ "; got != want {
		t.Errorf("TTY log %q, want %q", got, want)
	}
}
