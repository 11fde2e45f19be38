package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/suite"
)

// BenchmarkScale fills the engine through one cri-compose process with
// pods (each: its pause container and one running busybox `sleep`), up to
// each of -bench.levels in turn, and at each level measures:
//
//   - memory: VmRSS of the cri-compose process (also at 0 pods, right after
//     it became ready);
//   - list: ListPodSandbox and ListContainers, through gRPC on the unix
//     socket (cri-compose's own process), and the handlers called directly
//     in this process (a cri.Server on the same state dir, started for that
//     measurement only and stopped before anything else is measured);
//   - stats (at -bench.stats-pods): CPU of cri-compose, dockerd and
//     containerd for -bench.poll with no stats request (idle), then for as
//     long while ListContainerStats is polled at 1 Hz, and the latency of
//     those calls (the first, after idle, separately).
func BenchmarkScale(b *testing.B) {
	e := setup(b)
	lv, err := levels()
	if err != nil {
		b.Fatal(err)
	}
	// Cleanups run last first: the pods are removed after cri-compose
	// has stopped (it would otherwise chase every removal).
	b.Cleanup(func() { removeNamespace(e.d, e.namespace) })
	p := startCRI(b, e, "scale")
	cp := &criPath{rt: p.RT, ns: e.namespace, logDir: filepath.Join(p.Dir, "logs")}

	mem := &section{
		title:  "Memory: cri-compose RSS (VmRSS of its process; each pod = pause + 1 running busybox container)",
		header: []string{"pods", "CRI containers", "engine containers", "VmRSS MiB", "VmHWM (peak) MiB"},
	}
	list := &section{
		title:  "List latency (no filter; every pod and container of the runtime)",
		header: []string{"pods", "containers", "RPC", "via", "p50 ms", "p90 ms", "p99 ms", "response KiB"},
		notes: []string{
			"grpc: a gRPC client on cri-compose's unix socket (separate process), one call after another; includes marshalling both ways",
			"handler: the cri.Server method called in the benchmark process on a server with the same state dir (same store contents), no gRPC",
			"marshal / unmarshal: proto.Marshal of that answer (what the server adds to the handler) and proto.Unmarshal of it (what the client adds), in the benchmark process",
		},
	}
	addSection(mem)
	addSection(list)

	ctx := context.Background()
	if err := waitCtx(ctx, *flagSettle); err != nil {
		b.Fatal(err)
	}
	rss0, hwm, err := memStatus(p.Pid())
	if err != nil {
		b.Fatal(err)
	}
	mem.rows = append(mem.rows, []string{"0", "0", "0", fmt.Sprintf("%.1f", mib(rss0)), fmt.Sprintf("%.1f", mib(hwm))})
	leaf(b, "pods=0/metric=rss", metric{mib(rss0), "MiB"}, metric{mib(hwm), "peak-MiB"})

	fillCtx, cancel := context.WithTimeout(ctx, *flagFillTimeout)
	defer cancel()
	have := 0
	for _, n := range lv {
		if err := fill(fillCtx, cp, have, n); err != nil {
			b.Fatalf("filling the engine up to %d pods: %v", n, err)
		}
		have = n
		// Everything runs and cri-compose knows it.
		lctx, lcancel := ctxTimeout(time.Minute)
		r, err := p.RT.ListContainers(lctx, &runtime.ListContainersRequest{Filter: &runtime.ContainerFilter{
			State: &runtime.ContainerStateValue{State: runtime.ContainerState_CONTAINER_RUNNING}}})
		lcancel()
		if err != nil || len(r.GetContainers()) != n {
			b.Fatalf("%d pods started, cri-compose lists %d running containers (%v)", n, len(r.GetContainers()), err)
		}

		if err := waitCtx(ctx, *flagSettle); err != nil {
			b.Fatal(err)
		}
		rss, hwm, err := memStatus(p.Pid())
		if err != nil {
			b.Fatal(err)
		}
		mem.rows = append(mem.rows, []string{fmt.Sprint(n), fmt.Sprint(n), fmt.Sprint(2 * n), fmt.Sprintf("%.1f", mib(rss)), fmt.Sprintf("%.1f", mib(hwm))})
		leaf(b, fmt.Sprintf("pods=%d/metric=rss", n), metric{mib(rss), "MiB"}, metric{mib(hwm), "peak-MiB"})
		if n == lv[len(lv)-1] {
			addRatio("cri-compose RSS at %d pods (%d containers): %.1f MiB (%.1f at 0 pods) — target < 100 MiB at 500 pods", n, n, mib(rss), mib(rss0))
		}

		// List: through gRPC, then the handlers in process.
		grpcLat := map[string][]time.Duration{}
		sizes := map[string]int{}
		for _, rpc := range []string{"ListPodSandbox", "ListContainers"} {
			l, size, err := listCalls(func(ctx context.Context) (proto.Message, error) {
				if rpc == "ListPodSandbox" {
					return p.RT.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
				}
				return p.RT.ListContainers(ctx, &runtime.ListContainersRequest{})
			}, *flagListCalls)
			if err != nil {
				b.Fatalf("%s: %v", rpc, err)
			}
			grpcLat[rpc], sizes[rpc] = l, size
		}
		hl, err := handlerLatency(e, p, n)
		if err != nil {
			b.Fatalf("handlers in process: %v", err)
		}
		for _, rpc := range []string{"ListPodSandbox", "ListContainers"} {
			for _, via := range []string{"grpc", "handler", "marshal", "unmarshal"} {
				l := grpcLat[rpc]
				switch via {
				case "handler":
					l = hl[rpc]
				case "marshal", "unmarshal":
					l = hl[rpc+"/"+via]
				}
				list.rows = append(list.rows, []string{fmt.Sprint(n), fmt.Sprint(n), rpc, via,
					fms(pct(l, 50)), fms(pct(l, 90)), fms(pct(l, 99)), fmt.Sprintf("%.1f", float64(sizes[rpc])/1024)})
				leaf(b, fmt.Sprintf("pods=%d/rpc=%s/via=%s", n, rpc, via),
					metric{float64(pct(l, 50)), "ns/op"}, metric{ms(pct(l, 99)), "p99-ms"})
			}
			addRatio("%s with %d pods / %d containers: p50 %s ms in the handler + %s ms to encode the answer (server side); %s ms the whole gRPC call (p99 %s / %s) — target < 2 ms server-side",
				rpc, n, n, fms(pct(hl[rpc], 50)), fms(pct(hl[rpc+"/marshal"], 50)), fms(pct(grpcLat[rpc], 50)), fms(pct(hl[rpc], 99)), fms(pct(grpcLat[rpc], 99)))
		}

		if n == *flagStatsPods {
			statsAt(b, p, n)
		}
	}
	if !slices.Contains(lv, *flagStatsPods) {
		addRatio("stats not measured: -bench.stats-pods=%d is not one of -bench.levels=%s", *flagStatsPods, *flagLevels)
	}
}

// fill starts pods from..to-1 through cri-compose, -bench.workers at once.
func fill(ctx context.Context, cp *criPath, from, to int) error {
	fmt.Fprintf(os.Stderr, "[bench] starting pods %d..%d (%d at once)\n", from+1, to, *flagWorkers)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		done     atomic.Int64
	)
	start := time.Now()
	for w := 0; w < max(1, *flagWorkers); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				pctx, pcancel := context.WithTimeout(ctx, 3*time.Minute)
				_, _, err := cp.startPod(pctx, fmt.Sprintf("f%d", i))
				pcancel()
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("pod %d: %w", i, err); cancel() })
					return
				}
				if d := done.Add(1); d%50 == 0 {
					fmt.Fprintf(os.Stderr, "[bench] %d/%d pods started (%.1f pods/s)\n", from+int(d), to, float64(d)/time.Since(start).Seconds())
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w (-bench.fill-timeout=%v)", err, *flagFillTimeout)
	}
	fmt.Fprintf(os.Stderr, "[bench] %d pods started in %v\n", to-from, time.Since(start).Round(time.Millisecond))
	return nil
}

// listCalls makes n calls one after another (after 10 untimed ones) and
// returns their latencies and the size of the last response.
func listCalls(call func(context.Context) (proto.Message, error), n int) ([]time.Duration, int, error) {
	var size int
	lat := make([]time.Duration, 0, n)
	for i := -10; i < n; i++ {
		ctx, cancel := ctxTimeout(30 * time.Second)
		t0 := time.Now()
		m, err := call(ctx)
		d := time.Since(t0)
		cancel()
		if err != nil {
			return nil, 0, err
		}
		if i >= 0 {
			lat = append(lat, d)
		}
		size = proto.Size(m)
	}
	return lat, size, nil
}

// startObserver starts a cri.Server in this process that shares p's state
// dir, so its store holds the same pods, and waits until it lists n
// containers. It runs only for a measurement: while it runs it follows the
// pods as p does (events, log pumps of containers that write nothing), and
// it leaves the pods as they are when stopped.
func startObserver(e *benchEnv, p *suite.Daemon, n int) (*cri.Server, func(), error) {
	d, err := dockerapi.New("")
	if err != nil {
		return nil, nil, err
	}
	srv := cri.NewServer(cri.Config{StateDir: p.StateDir, Network: e.network}, d)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done; d.Close() }
	what := fmt.Sprintf("the in-process server to list %d containers", n)
	if err := suite.Poll(what, 5*time.Minute, func() (bool, string) {
		r, err := srv.ListContainers(ctx, &runtime.ListContainersRequest{})
		return err == nil && len(r.GetContainers()) >= n, fmt.Sprintf("%d listed (%v)", len(r.GetContainers()), err)
	}); err != nil {
		stop()
		return nil, nil, err
	}
	return srv, stop, nil
}

// handlerLatency calls the list handlers directly on an observer (above).
// With -bench.profile it also writes the observer's heap and a CPU profile
// of list calls.
func handlerLatency(e *benchEnv, p *suite.Daemon, n int) (map[string][]time.Duration, error) {
	srv, stop, err := startObserver(e, p, n)
	if err != nil {
		return nil, err
	}
	defer stop()
	calls := map[string]func(context.Context) (proto.Message, error){
		"ListPodSandbox": func(ctx context.Context) (proto.Message, error) {
			return srv.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		},
		"ListContainers": func(ctx context.Context) (proto.Message, error) {
			return srv.ListContainers(ctx, &runtime.ListContainersRequest{})
		},
	}
	out := map[string][]time.Duration{}
	for _, rpc := range []string{"ListPodSandbox", "ListContainers"} {
		l, _, err := listCalls(calls[rpc], *flagListCalls)
		if err != nil {
			return nil, err
		}
		out[rpc] = l
		// What gRPC adds: the server encodes the answer, the client
		// decodes it (the socket and the scheduling of two processes on
		// a busy machine are the rest).
		resp, err := calls[rpc](context.Background())
		if err != nil {
			return nil, err
		}
		var wire []byte
		out[rpc+"/marshal"], _, _ = listCalls(func(context.Context) (proto.Message, error) {
			wire, err = proto.Marshal(resp)
			return resp, err
		}, *flagListCalls)
		out[rpc+"/unmarshal"], _, _ = listCalls(func(context.Context) (proto.Message, error) {
			m := resp.ProtoReflect().New().Interface()
			return m, proto.Unmarshal(wire, m)
		}, *flagListCalls)
	}
	if *flagProfile != "" {
		err := profile(fmt.Sprintf("list-cpu-%dpods.pprof", n), func() {
			for _, rpc := range []string{"ListPodSandbox", "ListContainers"} {
				_, _, _ = listCalls(calls[rpc], 2000)
			}
		})
		if err == nil {
			err = writeHeap(fmt.Sprintf("heap-%dpods.pprof", n))
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// profile writes a CPU profile of f to -bench.profile/name.
func profile(name string, f func()) error {
	if err := os.MkdirAll(*flagProfile, 0o755); err != nil {
		return err
	}
	out, err := os.Create(filepath.Join(*flagProfile, name))
	if err != nil {
		return err
	}
	defer out.Close()
	if err := pprof.StartCPUProfile(out); err != nil {
		return err
	}
	f()
	pprof.StopCPUProfile()
	fmt.Fprintf(os.Stderr, "[bench] wrote %s\n", out.Name())
	return nil
}

// writeHeap writes this process's heap profile (after a GC) to
// -bench.profile/name.
func writeHeap(name string) error {
	if err := os.MkdirAll(*flagProfile, 0o755); err != nil {
		return err
	}
	goruntime.GC()
	out, err := os.Create(filepath.Join(*flagProfile, name))
	if err != nil {
		return err
	}
	defer out.Close()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	fmt.Fprintf(os.Stderr, "[bench] wrote %s (this process: heap in use %.1f MiB, stacks %.1f MiB, %d goroutines, runtime total %.1f MiB)\n",
		out.Name(), mib(ms.HeapInuse), mib(ms.StackInuse), goruntime.NumGoroutine(), mib(ms.Sys))
	if g, err := os.Create(strings.TrimSuffix(out.Name(), ".pprof") + "-goroutines.txt"); err == nil {
		_ = pprof.Lookup("goroutine").WriteTo(g, 1)
		g.Close()
	}
	return pprof.Lookup("heap").WriteTo(out, 0)
}

// statsAt measures the cost of stats with n running containers.
func statsAt(b *testing.B, p *suite.Daemon, n int) {
	names := []string{"cri-compose", "dockerd", "containerd"}
	pids := []int{p.Pid(), pidOf("dockerd"), pidOf("containerd")}
	for i, pid := range pids {
		if pid == 0 {
			fmt.Fprintf(os.Stderr, "[bench] no %s process found: its CPU is reported as 0\n", names[i])
		}
	}
	poll := *flagPoll
	fmt.Fprintf(os.Stderr, "[bench] CPU with %d running containers: %v idle, then %v polling ListContainerStats at 1 Hz\n", n, poll, poll)
	ctx := context.Background()
	m := newCPUMeter(names, pids)
	if err := waitCtx(ctx, poll); err != nil {
		b.Fatal(err)
	}
	idle := m.percent()

	var lat []time.Duration
	var first time.Duration
	var got, withCPU, withMem, withLayer int
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	m = newCPUMeter(names, pids)
	end := time.Now().Add(poll)
	for i := 0; time.Now().Before(end); i++ {
		cctx, cancel := ctxTimeout(30 * time.Second)
		t0 := time.Now()
		r, err := p.RT.ListContainerStats(cctx, &runtime.ListContainerStatsRequest{})
		d := time.Since(t0)
		cancel()
		if err != nil {
			b.Fatalf("ListContainerStats: %v", err)
		}
		if i == 0 {
			first = d
		} else {
			lat = append(lat, d)
		}
		got, withCPU, withMem, withLayer = len(r.GetStats()), 0, 0, 0
		for _, s := range r.GetStats() {
			if s.GetCpu().GetUsageCoreNanoSeconds() != nil {
				withCPU++
			}
			if s.GetMemory().GetWorkingSetBytes() != nil {
				withMem++
			}
			if s.GetWritableLayer().GetUsedBytes() != nil {
				withLayer++
			}
		}
		<-tick.C
	}
	polled := m.percent()
	if got != n {
		b.Fatalf("ListContainerStats answered %d containers, want %d", got, n)
	}
	if len(lat) == 0 {
		lat = []time.Duration{first}
	}

	sec := &section{
		title:  fmt.Sprintf("Stats: ListContainerStats with %d running containers, polled at 1 Hz for %v", n, poll),
		header: []string{"measure", "value"},
		rows: [][]string{
			{"ListContainerStats p50 ms (1 Hz polling)", fms(pct(lat, 50))},
			{"ListContainerStats p90 ms", fms(pct(lat, 90))},
			{"ListContainerStats max ms", fms(pct(lat, 100))},
			{"first call after idle ms (samples on the spot)", fms(first)},
			{"containers with CPU / memory / writable layer in the last answer", fmt.Sprintf("%d / %d / %d of %d", withCPU, withMem, withLayer, got)},
		},
	}
	for i, name := range names {
		sec.rows = append(sec.rows, []string{name + " CPU, % of one core: idle → polled", fmt.Sprintf("%.2f → %.2f", idle[i], polled[i])})
	}
	sum, sumIdle := polled[0]+polled[1], idle[0]+idle[1]
	sec.rows = append(sec.rows, []string{"cri-compose + dockerd, % of one core: idle → polled", fmt.Sprintf("%.2f → %.2f", sumIdle, sum)})
	sec.notes = append(sec.notes,
		"idle: the same span right before, with no stats request (cri-compose's sampler pauses after 2 minutes without one, so it was idle); dockerd and containerd serve every client of the engine, this machine's other users included",
		"CPU from utime+stime in /proc/<pid>/stat over the span; cri-compose is its own process (the binary), so this is all of it")
	addSection(sec)
	leaf(b, fmt.Sprintf("pods=%d/rpc=ListContainerStats/via=grpc", n), metric{float64(pct(lat, 50)), "ns/op"},
		metric{ms(pct(lat, 90)), "p90-ms"}, metric{ms(first), "first-ms"})
	leaf(b, fmt.Sprintf("pods=%d/metric=cpu/load=idle", n), metric{idle[0], "cri-compose-%cpu"}, metric{idle[1], "dockerd-%cpu"}, metric{idle[2], "containerd-%cpu"})
	leaf(b, fmt.Sprintf("pods=%d/metric=cpu/load=poll1hz", n), metric{polled[0], "cri-compose-%cpu"}, metric{polled[1], "dockerd-%cpu"}, metric{polled[2], "containerd-%cpu"})
	if *flagProfile != "" {
		if err := profileStats(b, p, n, poll); err != nil {
			b.Fatal(err)
		}
	}
	addRatio("ListContainerStats with %d containers: p50 %s ms, p90 %s ms, first after idle %s ms — target < 50 ms", n, fms(pct(lat, 50)), fms(pct(lat, 90)), fms(first))
	addRatio("polling ListContainerStats at 1 Hz with %d containers: cri-compose %.2f%% + dockerd %.2f%% = %.2f%% of one core (idle: %.2f%% + %.2f%%) — target < 10%%",
		n, polled[0], polled[1], sum, idle[0], idle[1])
}

// profileStats profiles an observer (startObserver) while a client polls
// its ListContainerStats at 1 Hz: the sampler and the handler, in process.
func profileStats(b *testing.B, p *suite.Daemon, n int, poll time.Duration) error {
	srv, stop, err := startObserver(theEnv, p, n)
	if err != nil {
		return err
	}
	defer stop()
	return profile(fmt.Sprintf("stats-cpu-%dpods.pprof", n), func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for end := time.Now().Add(poll); time.Now().Before(end); <-tick.C {
			if _, err := srv.ListContainerStats(context.Background(), &runtime.ListContainerStatsRequest{}); err != nil {
				b.Errorf("ListContainerStats in process: %v", err)
				return
			}
		}
	})
}
