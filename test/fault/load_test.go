package fault

// A CPU hog beside the tests (make test-fault): a guarantee that holds only
// on a quiet machine (a deadline met, a wait long enough, a list that is
// fast) fails in CI rather than on a user's busy node. The hog is this
// test binary run again as busy-loop processes: nothing to install, each
// one a process of its own that the kernel schedules against cri-compose
// and the engine as it would any other load, each bounded in time and
// killed with the test process.

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"syscall"
	"time"
)

var (
	cpuHog = flag.Int("fault.cpu-hog", envInt("FAULT_CPU_HOG", 0),
		"busy-loop processes to run beside the tests, each taking one CPU (0: none; make test-fault: one per CPU)")
	cpuHogMax = flag.Duration("fault.cpu-hog-max", 30*time.Minute,
		"the longest a busy-loop process runs, whatever happens to the test process")
)

// hogEnv, set in a child's environment, makes the test binary a busy loop
// until the time it holds (Unix seconds).
const hogEnv = "CRI_COMPOSE_FAULT_CPU_HOG_UNTIL"

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// runHogIfChild spins and exits when this process is a hog child.
func runHogIfChild() {
	v := os.Getenv(hogEnv)
	if v == "" {
		return
	}
	until, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		os.Exit(2)
	}
	goruntime.GOMAXPROCS(1)
	end := time.Unix(until, 0)
	x := 0
	for time.Now().Before(end) {
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
	}
	if x == 42 { // keep the loop from being optimised away
		fmt.Println(x)
	}
	os.Exit(0)
}

// startCPUHog starts n hog children, each ending by itself after max (or
// with this process: they get SIGKILL when it dies). stop kills them and
// says how much CPU they took, so a run's log shows the load was real.
func startCPUHog(n int, max time.Duration) (stop func() string, err error) {
	if n <= 0 {
		return func() string { return "" }, nil
	}
	until := strconv.FormatInt(time.Now().Add(max).Unix(), 10)
	var cmds []*exec.Cmd
	started := time.Now()
	kill := func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
		}
	}
	for i := 0; i < n; i++ {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), hogEnv+"="+until)
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			kill()
			return nil, fmt.Errorf("start CPU hog: %w", err)
		}
		cmds = append(cmds, c)
	}
	return func() string {
		kill()
		var cpu time.Duration
		for _, c := range cmds {
			_ = c.Wait()
			if st := c.ProcessState; st != nil {
				cpu += st.UserTime() + st.SystemTime()
			}
		}
		wall := time.Since(started)
		return fmt.Sprintf("CPU hog: %d busy processes beside the tests took %v of CPU in %v (%.1f CPUs)",
			n, cpu.Round(time.Second), wall.Round(time.Second), cpu.Seconds()/wall.Seconds())
	}, nil
}
