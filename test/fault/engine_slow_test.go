package fault

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/test/suite"
)

// engineLatency is how much later every request reaches the engine while
// it crawls; rpcDeadline is the client's deadline, well under it, and
// deadlineSlack what the server's handler may take beyond the deadline to
// give up (one that waited for the engine would take the whole latency).
const (
	engineLatency = 3 * time.Second
	rpcDeadline   = time.Second
	deadlineSlack = 500 * time.Millisecond
)

// TestEngineSlow: every request takes three more seconds to reach the
// engine. Each RPC that needs the engine honours its client's deadline
// of one second: the client gets DeadlineExceeded and the server's
// handler ran (grpc_server_handling_seconds) the deadline and a little,
// not until the engine answered; the lists answer from memory at
// once; calls that gave up leave no goroutines or file descriptors
// behind; and when the engine is fast again everything works. Then the
// engine goes away and comes back crawling: Status still answers within
// its deadline while the engine is prepared again.
func TestEngineSlow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if len(dir) > 80 {
		dir, _ = os.MkdirTemp("", "ccslow-")
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	p := newEngineProxy(t, dir)
	p.serve(t)
	k := newKube(t, "", suite.DaemonConfig{DockerHost: p.host(), Metrics: true})
	k.d.Start()
	pid := k.d.Pid()
	id, ctrs := k.runWith(k.podConfig("web", 0), "app", "victim")
	app, victim := ctrs[0], ctrs[1]
	created := k.create(id, ctrConfig("later", 0))
	suite.WaitCRILog(t, filepath.Join(k.pods[id].GetLogDirectory(), "app", "0.log"), "started app", 15*time.Second)
	g0, f0 := k.goroutines(), k.fds(pid)
	t.Logf("before: %d goroutines, %d file descriptors", g0, f0)

	p.setLatency(engineLatency)
	calls := []struct {
		method string
		call   func(ctx context.Context) error
	}{
		{"RunPodSandbox", func(ctx context.Context) error {
			_, err := k.d.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: k.podConfig("slow", 0)})
			return err
		}},
		{"CreateContainer", func(ctx context.Context) error {
			_, err := k.d.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: id, Config: ctrConfig("more", 0), SandboxConfig: k.pods[id]})
			return err
		}},
		{"StartContainer", func(ctx context.Context) error {
			_, err := k.d.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: created})
			return err
		}},
		{"StopContainer", func(ctx context.Context) error {
			_, err := k.d.RT.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: victim, Timeout: 0})
			return err
		}},
		{"ExecSync", func(ctx context.Context) error {
			_, err := k.d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: app, Cmd: []string{"true"}, Timeout: 10})
			return err
		}},
		{"ContainerStats", func(ctx context.Context) error {
			_, err := k.d.RT.ContainerStats(ctx, &runtime.ContainerStatsRequest{ContainerId: app})
			return err
		}},
		{"PodSandboxStats", func(ctx context.Context) error {
			_, err := k.d.RT.PodSandboxStats(ctx, &runtime.PodSandboxStatsRequest{PodSandboxId: id})
			return err
		}},
		{"ContainerStatus", func(ctx context.Context) error {
			_, err := k.d.RT.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: app, Verbose: true})
			return err
		}},
		{"PodSandboxStatus", func(ctx context.Context) error {
			_, err := k.d.RT.PodSandboxStatus(ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
			return err
		}},
		{"Status", func(ctx context.Context) error {
			_, err := k.d.RT.Status(ctx, &runtime.StatusRequest{Verbose: true})
			return err
		}},
		{"ImageStatus", func(ctx context.Context) error {
			_, err := k.d.Img.ImageStatus(ctx, &runtime.ImageStatusRequest{Image: &runtime.ImageSpec{Image: image}})
			return err
		}},
		{"ListImages", func(ctx context.Context) error {
			_, err := k.d.Img.ListImages(ctx, &runtime.ListImagesRequest{})
			return err
		}},
		{"PullImage", func(ctx context.Context) error {
			_, err := k.d.Img.PullImage(ctx, &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: image}})
			return err
		}},
		{"ImageFsInfo", func(ctx context.Context) error {
			_, err := k.d.Img.ImageFsInfo(ctx, &runtime.ImageFsInfoRequest{})
			return err
		}},
	}
	for _, c := range calls {
		client, server, err := k.timedCall(c.method, c.call)
		switch {
		case err == nil:
			t.Logf("%-16s answered in %v (from memory)", c.method, client.Round(time.Microsecond))
			if client > rpcDeadline {
				t.Errorf("%s answered after %v, past its deadline", c.method, client)
			}
		case status.Code(err) != codes.DeadlineExceeded:
			t.Errorf("%s while the engine crawls: %v, want DeadlineExceeded (or an answer from memory)", c.method, err)
		default:
			t.Logf("%-16s DeadlineExceeded after %v; the server's handler ran %v", c.method, client.Round(time.Millisecond), server.Round(time.Millisecond))
			if server > rpcDeadline+deadlineSlack {
				t.Errorf("%s: the server's handler ran %v, past the client's deadline of %v", c.method, server, rpcDeadline)
			}
		}
	}

	// The lists answer from memory while the engine crawls.
	lat := k.listLatencies(200)
	t.Logf("ListPodSandbox and ListContainers while the engine crawls: p50 %v, p99 %v, max %v (%d calls)",
		lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1], len(lat))
	if lat[len(lat)-1] > 250*time.Millisecond {
		t.Errorf("a list took %v while the engine crawls: it waited for the engine", lat[len(lat)-1])
	}

	// Many calls giving up at once leave nothing behind. What the calls
	// above set going on the engine is done first.
	time.Sleep(engineLatency + time.Second)
	k.settle("the delayed requests to finish", 15*time.Second)
	gb, fb := k.goroutines(), k.fds(pid)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(k.ctx, rpcDeadline)
			defer cancel()
			if i%2 == 0 {
				_, _ = k.d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: app, Cmd: []string{"true"}, Timeout: 10})
			} else {
				_, _ = k.d.RT.ContainerStats(ctx, &runtime.ContainerStatsRequest{ContainerId: app})
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Until(start.Add(rpcDeadline + deadlineSlack)))
	// Still before the requests reached the engine: only handlers that
	// gave up at their deadline are gone by now.
	g1, f1 := k.goroutines(), k.fds(pid)
	t.Logf("20 calls that gave up at once: %d goroutines and %d file descriptors before, %d and %d %v after they started",
		gb, fb, g1, f1, time.Since(start).Round(time.Millisecond))
	if g1 > gb+10 || f1 > fb+5 {
		t.Errorf("goroutines %d → %d, file descriptors %d → %d: the calls that gave up are still there", gb, g1, fb, f1)
	}

	// The engine is fast again: everything works.
	p.setLatency(0)
	k.d.WaitReadyIs(true, 20*time.Second)
	k.settle("the engine to catch up", 15*time.Second)
	// A request that gave up may have landed on the engine since: its event
	// brings it to the runtime, which then lists it for kubelet to remove.
	k.consistentWithin("once the engine is fast again", 20*time.Second)
	k.runWith(k.podConfig("after", 0), "app")

	// The engine goes away and comes back crawling: it is prepared again
	// (network, pause image) at its pace, and Status keeps its deadline
	// meanwhile.
	p.cut()
	k.d.WaitReadyIs(false, 10*time.Second)
	p.setLatency(engineLatency)
	p.serve(t)
	backAt := time.Now()
	var worst time.Duration
	for time.Since(backAt) < 4*engineLatency {
		client, server, err := k.timedCall("Status", func(ctx context.Context) error {
			_, err := k.d.RT.Status(ctx, &runtime.StatusRequest{})
			return err
		})
		if err != nil && status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("Status while the engine comes back crawling: %v", err)
		}
		worst = max(worst, server, client)
	}
	t.Logf("Status while the engine came back crawling: at most %v, client or server", worst.Round(time.Millisecond))
	if worst > rpcDeadline+deadlineSlack {
		t.Errorf("Status took %v with a deadline of %v while the engine came back crawling", worst, rpcDeadline)
	}
	p.setLatency(0)
	k.d.WaitReadyIs(true, 30*time.Second)
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}
	k.teardown()
	k.settle("the pods' goroutines to end", 15*time.Second)
	g2, f2 := k.goroutines(), k.fds(pid)
	t.Logf("after: %d goroutines, %d file descriptors (no pods left; %d and %d with the first pod)", g2, f2, g0, f0)
	if g2 > g0 || f2 > f0 {
		t.Errorf("goroutines %d → %d, file descriptors %d → %d, with fewer pods than at the start", g0, g2, f0, f2)
	}
}

// timedCall runs call with the RPC deadline and returns how long the
// client waited and how long the server's handler ran, as the server
// measured it (grpc_server_handling_seconds), once it was done.
func (k *kube) timedCall(method string, call func(ctx context.Context) error) (client, server time.Duration, err error) {
	k.t.Helper()
	n0, sum0 := k.handled(method)
	ctx, cancel := context.WithTimeout(k.ctx, rpcDeadline)
	defer cancel()
	start := time.Now()
	err = call(ctx)
	client = time.Since(start)
	suite.Eventually(k.t, method+": the server's handler to finish after the call", 10*time.Second, func() (bool, string) {
		n, sum := k.handled(method)
		if n > n0 {
			server = time.Duration((sum - sum0) * float64(time.Second))
			return true, ""
		}
		return false, fmt.Sprintf("%d calls finished, %d before", n, n0)
	})
	return client, server, err
}

// handled is how many calls of method the server finished, and the
// seconds its handlers ran in all.
func (k *kube) handled(method string) (n uint64, seconds float64) {
	k.t.Helper()
	fams, err := k.d.Metrics()
	if err != nil {
		k.t.Fatal(err)
	}
	for _, m := range fams["grpc_server_handling_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "grpc_method" && l.GetValue() == method {
				n += m.GetHistogram().GetSampleCount()
				seconds += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return n, seconds
}

func (k *kube) goroutines() int { return int(k.metric("go_goroutines")) }

// fds counts the open file descriptors of process pid.
func (k *kube) fds(pid int) int {
	k.t.Helper()
	e, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		k.t.Fatal(err)
	}
	return len(e)
}

// settle waits until the goroutine count holds still for a second.
func (k *kube) settle(what string, timeout time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	last := k.goroutines()
	for {
		time.Sleep(time.Second)
		n := k.goroutines()
		if n == last {
			return
		}
		if time.Now().After(deadline) {
			k.t.Logf("waited %v for %s: goroutines still moving (%d → %d)", timeout, what, last, n)
			return
		}
		last = n
	}
}

// listLatencies times n list calls (ListPodSandbox and ListContainers in
// turn), sorted.
func (k *kube) listLatencies(n int) []time.Duration {
	k.t.Helper()
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(k.ctx, rpcDeadline)
		start := time.Now()
		var err error
		if i%2 == 0 {
			_, err = k.d.RT.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		} else {
			_, err = k.d.RT.ListContainers(ctx, &runtime.ListContainersRequest{})
		}
		out = append(out, time.Since(start))
		cancel()
		if err != nil {
			k.t.Fatalf("list %d while the engine crawls: %v", i, err)
		}
	}
	slices.Sort(out)
	return out
}
