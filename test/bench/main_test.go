// Package bench measures cri-compose against the floor any Docker-backed
// runtime has (the same Engine API calls made directly) and against the
// obvious alternative (`docker compose up -d` of the same pod's compose
// file), in one process and one run, so their ratios are the result:
// absolute times drift between runs on shared machines.
//
// Every benchmark talks to a real cri-compose through a real gRPC client on
// a unix socket, on the real engine. cri-compose runs as a separate process
// (the binary, built by the run), so that /proc/<pid> measures it alone
// (CPU, RSS). Run it with `make bench` (full) or `make bench-smoke` (small);
// sizes come from the -bench.* flags below or the BENCH_* environment
// variables named in their help. After the Go benchmarks' own lines (which
// benchstat reads) it prints one summary table with the ratios.
//
// Everything a run creates carries its run id (pod namespace ccb-<run>,
// network ccb-<run>) and is removed when the run ends, fails or is
// interrupted; what a killed run left behind is swept by the next run.
package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/test/suite"
)

// Sizes and durations, from flags or BENCH_* variables.
var (
	flagPods = flag.Int("bench.pods", envInt("BENCH_PODS", 20),
		"pod start: pods started one after another by each path, interleaved (BENCH_PODS)")
	flagConcurrent = flag.Int("bench.concurrent", envInt("BENCH_CONCURRENT", 20),
		"pod start: pods started at once (BENCH_CONCURRENT)")
	flagRounds = flag.Int("bench.rounds", envInt("BENCH_ROUNDS", 3),
		"pod start: rounds of concurrent starts per path; the median wall time is reported (BENCH_ROUNDS)")
	flagCompose = flag.String("bench.compose", envStr("BENCH_COMPOSE", "auto"),
		"compose CLI path: v2 (built from test/tools), v1 (docker-compose), auto (v2, else v1) or off (BENCH_COMPOSE)")
	flagLevels = flag.String("bench.levels", envStr("BENCH_LEVELS", "100,500"),
		"scale: pod counts (each pod: its pause container and one running busybox container) for list and memory (BENCH_LEVELS)")
	flagStatsPods = flag.Int("bench.stats-pods", envInt("BENCH_STATS_PODS", 100),
		"scale: the level (one of -bench.levels) at which stats are measured (BENCH_STATS_PODS)")
	flagPoll = flag.Duration("bench.poll", envDuration("BENCH_POLL", 60*time.Second),
		"scale: how long ListContainerStats is polled at 1 Hz while CPU is measured; as long again is measured idle first (BENCH_POLL)")
	flagListCalls = flag.Int("bench.list-calls", envInt("BENCH_LIST_CALLS", 300),
		"scale: calls per list measurement (BENCH_LIST_CALLS)")
	flagWorkers = flag.Int("bench.workers", envInt("BENCH_WORKERS", 6),
		"scale: pods started at once while filling the engine (BENCH_WORKERS)")
	flagSettle = flag.Duration("bench.settle", envDuration("BENCH_SETTLE", 10*time.Second),
		"scale: wait after filling before RSS is read (BENCH_SETTLE)")
	flagFillTimeout = flag.Duration("bench.fill-timeout", envDuration("BENCH_FILL_TIMEOUT", 20*time.Minute),
		"scale: the longest filling the engine may take in all; the run fails past it (BENCH_FILL_TIMEOUT)")
	flagProfile = flag.String("bench.profile", envStr("BENCH_PROFILE", ""),
		"scale: write pprof profiles of an in-process server on the same pods here: heap and list CPU at each level, stats CPU while polled (BENCH_PROFILE)")
	flagLogMiB = flag.Int("bench.log-mib", envInt("BENCH_LOG_MIB", 64),
		"logs: MiB each full-speed shape writes (BENCH_LOG_MIB)")
	flagLogWindow = flag.Duration("bench.log-window", envDuration("BENCH_LOG_WINDOW", 20*time.Second),
		"logs: how long the CPU of a steadily writing container is measured (BENCH_LOG_WINDOW)")
	flagLogContainerd = flag.Bool("bench.log-containerd", envStr("BENCH_LOG_CONTAINERD", "true") == "true",
		"logs: run each shape through a private containerd's CRI too, as the field's anchor (BENCH_LOG_CONTAINERD)")
	flagReport = flag.String("bench.report", envStr("BENCH_REPORT", ""),
		"also write the summary (markdown) to this file (BENCH_REPORT)")
)

func envStr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(k)); err == nil {
		return v
	}
	return def
}

// levels parses -bench.levels.
func levels() ([]int, error) {
	var out []int
	for _, f := range strings.Split(*flagLevels, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-bench.levels: %q is not a pod count", f)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-bench.levels must rise: %v", *flagLevels)
		}
		out = append(out, n)
	}
	return out, nil
}

// The run: its id names everything it creates; its folder holds its pid,
// so a later run can tell a live run's objects from a dead one's.
var (
	benchRun *suite.Run
	runID    string
	runDir   string
)

// atExit registers f to run when the run ends (normally or by a signal),
// last first.
func atExit(f func()) { benchRun.Defer(f) }

func TestMain(m *testing.M) {
	flag.Parse()
	// The in-process server (scale_test.go) logs through klog: keep the
	// benchmark output to the benchmark lines and the summary.
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	_ = kfs.Set("logtostderr", "false")
	_ = kfs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // `go test ./...`: no benchmark, nothing to set up
	}
	var err error
	if benchRun, err = suite.NewRun("ccbench"); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	runID, runDir = benchRun.ID, benchRun.Dir

	// Ctrl-C, SIGTERM: remove what the run made, then leave.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "\n[bench] %v: removing what this run created\n", s)
		benchRun.Cleanup()
		os.Exit(2)
	}()

	start := time.Now()
	code := suite.Main(m)
	benchRun.Cleanup()
	printSummary(time.Since(start), code != 0)
	os.Exit(code)
}

// ctxTimeout is a context for one engine or CRI call.
func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
