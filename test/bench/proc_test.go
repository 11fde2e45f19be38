package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criProc is cri-compose running as a process of its own (the binary this
// run built), with a gRPC client on its unix socket.
type criProc struct {
	dir, sock, state string
	cmd              *exec.Cmd
	exited           chan struct{}
	conn             *grpc.ClientConn
	rt               runtime.RuntimeServiceClient
	stopOnce         sync.Once
}

// startCRI starts bin/cri-compose on a fresh state dir and socket, serving
// pods on the run's network, and waits until it reports ready. It is
// stopped when b ends (or the run is interrupted); the pods it started are
// the run's to remove.
func startCRI(b *testing.B, e *benchEnv, name string) *criProc {
	b.Helper()
	p := &criProc{dir: filepath.Join(runDir, name), exited: make(chan struct{})}
	p.sock, p.state = filepath.Join(p.dir, "cri.sock"), filepath.Join(p.dir, "state")
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(p.dir, "cri-compose.log"))
	if err != nil {
		b.Fatal(err)
	}
	p.cmd = exec.Command(e.bin, "--listen", "unix://"+p.sock, "--state-dir", p.state,
		"--network", e.network, "--stream-address", "127.0.0.1:0")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Dies with the benchmark process, whatever ends it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		b.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.exited) }()
	b.Cleanup(p.stop)
	atExit(p.stop)

	p.conn, err = grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		b.Fatal(err)
	}
	p.rt = runtime.NewRuntimeServiceClient(p.conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := ctxTimeout(5 * time.Second)
		st, err := p.rt.Status(ctx, &runtime.StatusRequest{})
		cancel()
		if err == nil && ready(st) {
			return p
		}
		select {
		case <-p.exited:
			b.Fatalf("cri-compose exited: %v (log: %s)", p.cmd.ProcessState, tail(filepath.Join(p.dir, "cri-compose.log")))
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("cri-compose not ready after 60s: %v %v (log: %s)", st, err, tail(filepath.Join(p.dir, "cri-compose.log")))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ready(r *runtime.StatusResponse) bool {
	for _, c := range r.GetStatus().GetConditions() {
		if c.GetType() == runtime.RuntimeReady {
			return c.GetStatus()
		}
	}
	return false
}

func (p *criProc) pid() int { return p.cmd.Process.Pid }

// stop ends the process (SIGTERM, then SIGKILL after 15 s). Its pods keep
// running, as they do when the real service stops.
func (p *criProc) stop() {
	p.stopOnce.Do(func() {
		if p.conn != nil {
			p.conn.Close()
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
}

// tail is the end of a log file, for failures.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// --- /proc

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Docker runs on.
const clockTicks = 100

// cpuTime is the user+system CPU time a process has used.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its end.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseUint(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
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

// pidOf finds the oldest process whose command name is comm (dockerd,
// containerd): 0 if none.
func pidOf(comm string) int {
	ents, _ := os.ReadDir("/proc")
	best := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if best == 0 || pid < best {
			best = pid
		}
	}
	return best
}

func pidAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

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
