package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkPodStart starts one-container pods (an infra container on the
// pod network and a busybox `sleep` joined to its namespaces) three ways,
// in one process, interleaved so that a machine that gets busier or
// quieter meanwhile weighs on all three alike:
//
//   - cri-compose: RunPodSandbox + CreateContainer + StartContainer through
//     gRPC on its unix socket (cri-compose runs as its own process);
//   - engine-floor: the same Engine API calls made directly: create + start
//     the pause container on the pod network, create + start busybox joined
//     to its network, IPC and PID namespaces;
//   - compose-cli: `docker compose up -d` of the compose file cri-compose
//     keeps for such a pod (`docker-compose` where only v1 exists).
//
// mode=seq: -bench.pods pods one after another per path (each removed
// before the next starts, untimed); mode=conc<N>: N pods at once, wall
// time for all N, median of -bench.rounds rounds per path.
func BenchmarkPodStart(b *testing.B) {
	e := setup(b)
	p := startCRI(b, e, "podstart")
	cri := &criPath{rt: p.RT, ns: e.namespace, logDir: b.TempDir()}
	paths := []path{&floorPath{d: e.d, network: e.network, ns: e.namespace}, cri}

	// Warm-up: one pod per path, untimed (first starts pay cold caches).
	// cri-compose's gives the compose file the CLI path starts.
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	undo, err := cri.start(wctx, "warm")
	if err != nil {
		undo()
		b.Fatalf("cri-compose: %v", err)
	}
	composeNote := ""
	if e.composeCmd != nil {
		file, err := exportComposeFile(p.StateDir, podConfig(cri.ns, "warm", cri.logDir))
		if err != nil {
			undo()
			b.Fatal(err)
		}
		paths = append(paths, &composePath{d: e.d, cmd: e.composeCmd, env: e.composeEnv, file: file})
		composeNote = fmt.Sprintf("compose-cli: `%s -p <new project> -f compose.yaml up -d`, the compose file cri-compose keeps for the same pod (<state>/projects/<project>/compose.yaml); %s", strings.Join(e.composeCmd, " "), e.composeName)
	} else {
		composeNote = "compose-cli: not measured: " + e.composeWhy
	}
	undo()
	for _, pt := range paths {
		if pt.name() == pathCRI {
			continue
		}
		u, err := pt.start(wctx, "warm")
		if cp, ok := pt.(*composePath); ok && err == nil {
			err = cp.check(wctx, "warm") // it did start what cri-compose does
		}
		u()
		if err != nil {
			b.Fatalf("%s: %v", pt.name(), err)
		}
	}

	// One after another, rotating which path goes first.
	n := *flagPods
	seq := map[string][]time.Duration{}
	fmt.Fprintf(os.Stderr, "[bench] pod start, %d pods one after another per path (%d paths, interleaved)\n", n, len(paths))
	for i := 0; i < n; i++ {
		for j := range paths {
			pt := paths[(i+j)%len(paths)]
			tag := fmt.Sprintf("s%d", i)
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			t0 := time.Now()
			undo, err := pt.start(ctx, tag)
			took := time.Since(t0)
			cancel()
			undo()
			if err != nil {
				b.Fatalf("%s, pod %d: %v", pt.name(), i, err)
			}
			seq[pt.name()] = append(seq[pt.name()], took)
		}
	}

	// N at once, per path, rounds interleaved.
	k, rounds := *flagConcurrent, *flagRounds
	walls := map[string][]time.Duration{}
	each := map[string][]time.Duration{}
	if k > 1 && rounds > 0 {
		fmt.Fprintf(os.Stderr, "[bench] pod start, %d pods at once, %d rounds per path\n", k, rounds)
	}
	for r := 0; k > 1 && r < rounds; r++ {
		for j := range paths {
			pt := paths[(r+j)%len(paths)]
			wall, per, err := startMany(ctx, pt, fmt.Sprintf("c%d", r), k)
			if err != nil {
				b.Fatalf("%s, %d at once: %v", pt.name(), k, err)
			}
			walls[pt.name()] = append(walls[pt.name()], wall)
			each[pt.name()] = append(each[pt.name()], per...)
		}
	}

	// Report: benchstat lines, then the summary.
	floor50 := pct(seq[pathFloor], 50)
	sec := &section{
		title:  fmt.Sprintf("Pod start: RunPodSandbox + CreateContainer + StartContainer of one busybox container (%d pods one after another per path, interleaved)", n),
		header: []string{"path", "p50 ms", "p90 ms", "p50 / floor"},
	}
	for _, pt := range paths {
		l := seq[pt.name()]
		r := float64(pct(l, 50)) / float64(floor50)
		sec.rows = append(sec.rows, []string{pt.name(), fms(pct(l, 50)), fms(pct(l, 90)), fmt.Sprintf("%.3f", r)})
		leaf(b, "mode=seq/path="+pt.name(), metric{float64(pct(l, 50)), "ns/op"}, metric{ms(pct(l, 90)), "p90-ms"}, metric{r, "x-floor"})
	}
	sec.notes = append(sec.notes, composeNote,
		"engine-floor: create + start the pause container on the pod network, create + start busybox joined to its network, IPC and PID namespaces, from the benchmark process through the same engine client cri-compose uses",
		"each pod is removed (untimed) before the next starts; one untimed warm-up pod per path first")
	addSection(sec)
	cri50 := pct(seq[pathCRI], 50)
	addRatio("pod start, one at a time: cri-compose / engine floor = %.3f (p50 %s / %s ms; p90 %.3f) — target ≤ 1.05",
		float64(cri50)/float64(floor50), fms(cri50), fms(floor50), float64(pct(seq[pathCRI], 90))/float64(pct(seq[pathFloor], 90)))
	if l, ok := seq[pathCompose]; ok {
		addRatio("pod start, one at a time: compose CLI / engine floor = %.2f, compose CLI / cri-compose = %.2f (p50)",
			float64(pct(l, 50))/float64(floor50), float64(pct(l, 50))/float64(cri50))
	}

	if len(walls) > 0 {
		csec := &section{
			title:  fmt.Sprintf("Pod start: %d pods at once (wall time until all %d run; median of %d rounds per path)", k, k, rounds),
			header: []string{"path", "wall ms", fmt.Sprintf("%d × one (seq p50) ms", k), fmt.Sprintf("wall / (%d × one)", k), "wall / floor wall", "per-pod p50 ms", "per-pod p90 ms"},
		}
		floorWall := pct(walls[pathFloor], 50)
		for _, pt := range paths {
			w := pct(walls[pt.name()], 50)
			one := pct(seq[pt.name()], 50)
			r := float64(w) / float64(time.Duration(k)*one)
			csec.rows = append(csec.rows, []string{pt.name(), fms(w), fms(time.Duration(k) * one), fmt.Sprintf("%.3f", r),
				fmt.Sprintf("%.3f", float64(w)/float64(floorWall)), fms(pct(each[pt.name()], 50)), fms(pct(each[pt.name()], 90))})
			leaf(b, fmt.Sprintf("mode=conc%d/path=%s", k, pt.name()), metric{float64(w), "ns/op"},
				metric{r, "x-serial"}, metric{float64(w) / float64(floorWall), "x-floor"}, metric{ms(pct(each[pt.name()], 50)), "pod-p50-ms"})
		}
		addSection(csec)
		w := pct(walls[pathCRI], 50)
		addRatio("%d pods at once through cri-compose: wall %s ms = %.3f × (%d × one pod's p50) — target < 1; %.3f × the floor's %d at once",
			k, fms(w), float64(w)/float64(time.Duration(k)*cri50), k, float64(w)/float64(floorWall), k)
	}
}

// startMany starts k pods at once through pt and returns the wall time
// until all ran and each pod's own time; it removes them all afterwards.
func startMany(ctx context.Context, pt path, tag string, k int) (time.Duration, []time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	per := make([]time.Duration, k)
	undos := make([]func(), k)
	errs := make([]error, k)
	gate := make(chan struct{})
	for i := 0; i < k; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			t0 := time.Now()
			undos[i], errs[i] = pt.start(ctx, fmt.Sprintf("%s-%d", tag, i))
			per[i] = time.Since(t0)
		}()
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	wall := time.Since(t0)
	var cw sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, u := range undos {
		if u == nil {
			continue
		}
		cw.Add(1)
		sem <- struct{}{}
		go func() { defer cw.Done(); defer func() { <-sem }(); u() }()
	}
	cw.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, nil, err
		}
	}
	slices.Sort(per)
	return wall, per, nil
}
