// Package churn creates and deletes pods in a loop against a cri.Server
// run in the test process (so its goroutines, file descriptors and memory
// can be measured exactly) on the real engine, then checks that nothing
// leaked: containers, networks, project folders, log pumps, goroutines,
// file descriptors, and memory back within 10% of where it started.
//
// Memory is compared after a first full round (the warm-up), which brings
// the process to its working size for the load; goroutines, descriptors
// and log pumps must be back to what they were before it too.
//
// CI mode (go test ./test/churn): 30 pods, a warm-up round and 2 more,
// about a minute and a half. Soak (make soak): 200 pods for 10 minutes.
// Flags, after -args: -churn.pods, -churn.rounds, -churn.duration,
// -churn.parallel, -churn.heap-profiles (or CHURN_PODS, CHURN_ROUNDS,
// CHURN_DURATION, CHURN_PARALLEL, CHURN_HEAP_PROFILES).
package churn

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

var (
	pods     = flag.Int("churn.pods", envInt("CHURN_PODS", 30), "pods alive at once in each round")
	rounds   = flag.Int("churn.rounds", envInt("CHURN_ROUNDS", 2), "rounds of create-all then delete-all after the warm-up round (at least)")
	duration = flag.Duration("churn.duration", envDuration("CHURN_DURATION", 0), "go on with more rounds until this much time has passed")
	parallel = flag.Int("churn.parallel", envInt("CHURN_PARALLEL", 8), "requests in flight at once, like kubelet's pod workers")
	profiles = flag.String("churn.heap-profiles", os.Getenv("CHURN_HEAP_PROFILES"), "folder to write heap profiles to after the warm-up and at the end (go tool pprof -base)")
)

func writeHeapProfile(t *testing.T, name string) {
	if *profiles == "" {
		return
	}
	goruntime.GC()
	f, err := os.Create(filepath.Join(*profiles, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		t.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

const image = suite.Image

// usage is what the process holds at one time.
type usage struct {
	goroutines int
	fds        int
	logFDs     int // open files under the pods' log dir
	rss        int64
	heap       uint64 // live heap after a GC
	pumps      float64

	up, down time.Duration // round: all pods up, all pods down
}

func (u usage) String() string {
	return fmt.Sprintf("goroutines %d, fds %d (log files %d), RSS %.1f MiB, live heap %.2f MiB, log pumps %.0f",
		u.goroutines, u.fds, u.logFDs, float64(u.rss)/(1<<20), float64(u.heap)/(1<<20), u.pumps)
}

type env struct {
	t      *testing.T
	rt     runtime.RuntimeServiceClient
	reg    *prometheus.Registry
	eng    *suite.Engine
	logDir string
	state  string
	ns     string
	net    string
}

// measure collects garbage, returns the freed memory to the system, and
// reads what the process holds.
func (e *env) measure() usage {
	goruntime.GC()
	debug.FreeOSMemory()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	u := usage{goroutines: goruntime.NumGoroutine(), heap: ms.HeapAlloc}
	entries, _ := os.ReadDir("/proc/self/fd")
	u.fds = len(entries)
	for _, en := range entries {
		if l, err := os.Readlink("/proc/self/fd/" + en.Name()); err == nil && strings.HasPrefix(l, e.logDir) {
			u.logFDs++
		}
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				u.rss = kb << 10
			}
		}
	}
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "cri_compose_log_pumps" && len(mf.GetMetric()) > 0 {
			u.pumps = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return u
}

func TestChurn(t *testing.T) {
	if raceEnabled && os.Getenv("CHURN_UNDER_RACE") == "" {
		// The race detector's shadow memory and slowness would be what is
		// measured; the same code runs under -race in pkg/cri and
		// test/fault. CI runs this without it: make churn.
		t.Skip("measures memory: run without -race (make churn), or set CHURN_UNDER_RACE=1")
	}
	if *profiles != "" {
		goruntime.MemProfileRate = 1 // every allocation, for an exact difference
	}
	eng := suite.NewEngine(t, "")
	pctx, pcancel := context.WithTimeout(context.Background(), 15*time.Second)
	_, err := eng.Ping(pctx)
	pcancel()
	if err != nil {
		images.SkipOrFail(t, "no Docker engine answers at %s: %v", eng.Host(), err)
	}

	dir, err := os.MkdirTemp("", "ccchurn-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, eng: eng, logDir: filepath.Join(dir, "logs"), state: filepath.Join(dir, "state"),
		ns: "churn-" + suite.RunID(), net: "ccchurn-" + suite.RunID(), reg: prometheus.NewRegistry()}
	t.Cleanup(func() {
		if left := eng.Sweep(e.ns, e.net); len(left) > 0 {
			t.Logf("cleanup removed %d containers the test left", len(left))
		}
		os.RemoveAll(dir)
	})

	e.rt = suite.StartServer(t, suite.ServerOptions{
		Config: cri.Config{StateDir: e.state, Network: e.net},
		Setup:  func(srv *cri.Server) { e.reg.MustRegister(srv.Collectors()...) },
	}).RT

	fresh := e.measure()
	t.Logf("fresh:        %v", fresh)
	// One full round first: code paged in, connection pools, buffers,
	// goroutine stacks and the bounded memory of deleted pods (kept for
	// events) all reach their size for this load on first use. The churn
	// after it must then not grow them.
	e.round(0, *pods)
	base := e.settle(fresh, 15*time.Second)
	t.Logf("after warm-up: %v", base)
	writeHeapProfile(t, "heap.base")

	start := time.Now()
	n := 0
	var peak usage
	for n < *rounds || time.Since(start) < *duration {
		n++
		rs := time.Now()
		p := e.round(n, *pods)
		if p.rss > peak.rss {
			peak = p
		}
		t.Logf("round %d: %d pods up in %v, down in %v, round %v (at peak: %v)", n, *pods,
			p.up.Round(time.Millisecond), p.down.Round(time.Millisecond), time.Since(rs).Round(time.Millisecond), p)
		if t.Failed() {
			break
		}
	}
	elapsed := time.Since(start)
	end := e.settle(base, 15*time.Second)
	writeHeapProfile(t, "heap.end")
	t.Logf("churn: %d rounds of %d pods (%d pods) in %v; %.1f pods/s", n, *pods, n**pods, elapsed.Round(time.Millisecond), float64(n**pods)/elapsed.Seconds())
	t.Logf("at the end:   %v", end)
	e.checkEngine()

	if end.pumps != 0 {
		t.Errorf("%v log pumps still run with no container left", end.pumps)
	}
	if end.logFDs != 0 {
		t.Errorf("%d log files still open with no container left", end.logFDs)
	}
	if end.goroutines > fresh.goroutines+2 {
		t.Errorf("goroutines: %d after the churn, %d at the start", end.goroutines, fresh.goroutines)
	}
	if end.fds > fresh.fds+2 {
		t.Errorf("file descriptors: %d after the churn, %d at the start", end.fds, fresh.fds)
	}
	if end.goroutines > base.goroutines+2 {
		t.Errorf("goroutines: %d after the churn, %d before", end.goroutines, base.goroutines)
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
	}
	if end.fds > base.fds+2 {
		t.Errorf("file descriptors: %d after the churn, %d before", end.fds, base.fds)
		listFDs(t)
	}
	if limit := int64(math.Ceil(float64(base.rss) * 1.10)); end.rss > limit {
		if raceEnabled {
			// The race detector's shadow memory is never given back.
			t.Logf("RSS %.1f MiB after the churn, %.1f MiB before (not checked under -race)", float64(end.rss)/(1<<20), float64(base.rss)/(1<<20))
		} else {
			t.Errorf("RSS %.1f MiB after the churn, more than 10%% over %.1f MiB before", float64(end.rss)/(1<<20), float64(base.rss)/(1<<20))
		}
	}
}

// settle waits (up to timeout) until goroutines and fds are back to base,
// as the last pumps and idle connections wind down, and measures.
func (e *env) settle(base usage, timeout time.Duration) usage {
	deadline := time.Now().Add(timeout)
	for {
		u := e.measure()
		if time.Now().After(deadline) || (u.goroutines <= base.goroutines && u.fds <= base.fds && u.pumps == 0) {
			return u
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// round runs n pods of one container each, lists and reads them as
// kubelet does, then stops and removes them all; it checks every
// container's output reached its log and returns what the process held
// with all pods up.
func (e *env) round(r, n int) usage {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var failed atomic.Int32
	fail := func(format string, args ...any) {
		if failed.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	ids := make([]string, n)
	logs := make([]string, n)
	t0 := time.Now()
	each(n, func(i int) {
		name := fmt.Sprintf("p%d-%d", r, i)
		pod := &runtime.PodSandboxConfig{
			Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: e.ns, Uid: e.ns + "-" + name},
			Hostname:     name,
			LogDirectory: filepath.Join(e.logDir, name),
		}
		rr, err := e.rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: pod})
		if err != nil {
			fail("RunPodSandbox %s: %v", name, err)
			return
		}
		ids[i] = rr.GetPodSandboxId()
		// Half the containers exit at once (their pump drains and ends),
		// half run on (their pump is stopped with them).
		cmd := "echo hello from " + name
		if i%2 == 1 {
			cmd += "; exec sleep 3600"
		}
		cr, err := e.rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: ids[i], SandboxConfig: pod,
			Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "app"}, Image: &runtime.ImageSpec{Image: image},
				Command: []string{"sh", "-c", cmd}, LogPath: "app.log"}})
		if err != nil {
			fail("CreateContainer %s: %v", name, err)
			return
		}
		if _, err := e.rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: cr.GetContainerId()}); err != nil {
			fail("StartContainer %s: %v", name, err)
			return
		}
		logs[i] = filepath.Join(pod.GetLogDirectory(), "app.log")
	})
	up := time.Since(t0)
	// What kubelet reads all the time.
	if _, err := e.rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{}); err != nil {
		fail("ListPodSandbox: %v", err)
	}
	if _, err := e.rt.ListContainers(ctx, &runtime.ListContainersRequest{}); err != nil {
		fail("ListContainers: %v", err)
	}
	if _, err := e.rt.ListContainerStats(ctx, &runtime.ListContainerStatsRequest{}); err != nil {
		fail("ListContainerStats: %v", err)
	}
	// Every container's first line reaches its log.
	each(n, func(i int) {
		if logs[i] == "" {
			return
		}
		// Poll, not Eventually: this runs off the test goroutine, and fail
		// caps how many errors are reported.
		if err := suite.Poll("log "+logs[i]+" to hold its line", 30*time.Second, func() (bool, string) {
			b, _ := os.ReadFile(logs[i])
			return strings.Contains(string(b), " stdout F hello from "), fmt.Sprintf("%q", b)
		}); err != nil {
			fail("%v", err)
		}
	})
	peak := e.measure()
	t1 := time.Now()
	each(n, func(i int) {
		if ids[i] == "" {
			return
		}
		if _, err := e.rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: ids[i]}); err != nil {
			fail("StopPodSandbox: %v", err)
		}
		if _, err := e.rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: ids[i]}); err != nil {
			fail("RemovePodSandbox: %v", err)
		}
	})
	peak.up, peak.down = up, time.Since(t1)
	// kubelet removes the pods' log folders.
	if err := os.RemoveAll(e.logDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return peak
}

// each runs f(0..n-1), *parallel at a time.
func each(n int, f func(i int)) {
	sem := make(chan struct{}, max(1, *parallel))
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// checkEngine checks that no container, project folder or extra network
// of the churn is left.
func (e *env) checkEngine() {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	left, err := e.eng.Containers(ctx, e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%d containers left in the engine", len(left))
	}
	if f := suite.ProjectFolders(e.state); len(f) > 0 {
		t.Errorf("%d project folders left: %v", len(f), f[:min(len(f), 5)])
	}
	if n, err := e.eng.Networks(ctx, e.net); err != nil || n != 1 {
		t.Errorf("%d networks named %s (%v), want 1", n, e.net, err)
	}
	if n, err := e.eng.NetworkEndpoints(ctx, e.net); err != nil || n != 0 {
		t.Errorf("%d containers still attached to %s (%v)", n, e.net, err)
	}
}

func listFDs(t *testing.T) {
	entries, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, en := range entries {
		l, _ := os.Readlink("/proc/self/fd/" + en.Name())
		out = append(out, en.Name()+" -> "+l)
	}
	t.Logf("open file descriptors:\n%s", strings.Join(out, "\n"))
}
