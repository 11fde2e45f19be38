package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/cri-compose/cri-compose/test/suite"
)

// startCRI starts bin/cri-compose (as a process of its own, so that
// /proc/<pid> measures it alone) on a fresh state dir and socket, serving
// pods on the run's network, and waits until it reports ready. It is
// stopped when b ends (or the run is interrupted); the pods it started are
// the run's to remove, as they keep running when the real service stops.
func startCRI(b *testing.B, e *benchEnv, name string) *suite.Daemon {
	b.Helper()
	p := suite.NewDaemon(b, suite.DaemonConfig{
		Bin: e.bin, Dir: runDir, Network: e.network, ReadyTimeout: time.Minute,
		Args: []string{"--stream-address", "127.0.0.1:0", "-v=0"},
		GRPC: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))},
	})
	atExit(func() { _, _ = p.Proc.Stop(syscall.SIGTERM) })
	p.Start()
	return p
}

// --- /proc

// cpuTime is the user+system CPU time a process has used.
func cpuTime(pid int) (time.Duration, error) {
	self, _, err := suite.CPUTime(pid)
	return self, err
}

// memStatus is VmRSS and VmHWM (peak RSS) of a process, in bytes.
func memStatus(pid int) (rss, hwm uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
	}
	return rss, hwm, nil
}

var (
	pidOf  = suite.PidOf
	pidsOf = suite.PidsOf
)

// cpuMeter measures the CPU that some processes use over a span of time.
type cpuMeter struct {
	names []string
	pids  []int
	start []time.Duration
	at    time.Time
}

func newCPUMeter(names []string, pids []int) *cpuMeter {
	m := &cpuMeter{names: names, pids: pids, start: make([]time.Duration, len(pids)), at: time.Now()}
	for i, pid := range pids {
		m.start[i], _ = cpuTime(pid)
	}
	return m
}

// percent is each process's CPU since the start in % of one core.
func (m *cpuMeter) percent() []float64 {
	wall := time.Since(m.at)
	out := make([]float64, len(m.pids))
	for i, pid := range m.pids {
		if pid == 0 {
			continue
		}
		t, err := cpuTime(pid)
		if err != nil {
			continue
		}
		out[i] = float64(t-m.start[i]) / float64(wall) * 100
	}
	return out
}

// waitCtx sleeps d unless ctx ends first.
func waitCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
