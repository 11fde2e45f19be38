package suite_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// TestProcess: a process logs each start to a file of its own, a restart
// runs it anew (another pid), Stop ends it by the signal, and a process
// that ignores the signal is killed after StopGrace with an error.
func TestProcess(t *testing.T) {
	p := &suite.Process{Name: "sh", Bin: "/bin/sh", Dir: t.TempDir(),
		Args: []string{"-c", `echo "started $$"; exec sleep 60`}}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	suite.Eventually(t, "the first run's line", 10*time.Second, func() (bool, string) {
		return strings.HasPrefix(p.LogTail(1), "started "), p.Log()
	})
	first := p.Pid()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	suite.Eventually(t, "the second run's line", 10*time.Second, func() (bool, string) {
		return strings.HasPrefix(p.LogTail(1), "started "), p.Log()
	})
	if p.Pid() == first || p.Starts() != 2 || filepath.Base(p.LogPath()) != "sh.2.log" {
		t.Errorf("after Restart: pid %d (was %d), %d starts, log %s", p.Pid(), first, p.Starts(), p.LogPath())
	}
	if b, err := os.ReadFile(filepath.Join(p.Dir, "sh.1.log")); err != nil || !strings.HasPrefix(string(b), "started ") {
		t.Errorf("the first run's log: %q, %v", b, err)
	}
	st, err := p.Stop(syscall.SIGTERM)
	if err != nil || st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Errorf("Stop: %v, %v; want ended by SIGTERM", st, err)
	}
	if p.Running() || p.Pid() != 0 {
		t.Errorf("stopped, yet running (pid %d)", p.Pid())
	}
	if st, err := p.Stop(syscall.SIGTERM); st != nil || err != nil {
		t.Errorf("Stop of a stopped process: %v, %v", st, err)
	}
}

// TestPoll: Poll says what it waited for and the condition's last word.
func TestPoll(t *testing.T) {
	n := 0
	err := suite.Poll("n to reach 1000", 200*time.Millisecond, func() (bool, string) {
		n++
		return n >= 1000, "n is small"
	})
	if err == nil || !strings.Contains(err.Error(), "n to reach 1000") || !strings.Contains(err.Error(), "n is small") {
		t.Errorf("Poll: %v", err)
	}
	if n < 2 {
		t.Errorf("cond asked %d times in 200ms", n)
	}
	if err := suite.Poll("at once", time.Second, func() (bool, string) { return true, "" }); err != nil {
		t.Errorf("Poll of a condition that holds: %v", err)
	}
}

// TestWaitSocketExited: waiting for a socket ends when the process that
// should serve it has exited.
func TestWaitSocketExited(t *testing.T) {
	p := &suite.Process{Name: "false", Bin: "/bin/false", Dir: t.TempDir()}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := suite.WaitSocket(filepath.Join(p.Dir, "none.sock"), time.Minute, p.Exited())
	if err == nil || time.Since(start) > 30*time.Second {
		t.Errorf("WaitSocket: %v after %v, want ErrExited at once", err, time.Since(start))
	}
}

// TestDaemon is what a suite needs to run cri-compose as kubelet would:
// a daemon, started, ready, and stopped cleanly by SIGTERM.
func TestDaemon(t *testing.T) {
	images.Engine(t) // skips (fails in CI) without one
	d := suite.NewDaemon(t, suite.DaemonConfig{})
	d.Start()
	if ok, why := d.Ready(); !ok {
		t.Fatalf("started, not ready: %s", why)
	}
	if st := d.Stop(syscall.SIGTERM); st == nil || !st.Success() {
		t.Errorf("after SIGTERM: %v, want exit status 0\n%s", st, d.LogTail(20))
	}
}

// TestServer runs a pod through an in-process server, restarts it on the
// same state dir and finds the runtime ready again.
func TestServer(t *testing.T) {
	s := suite.StartServer(t, suite.ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.Lifecycle(ctx, "suite", nil)
	state := s.StateDir()
	s.Restart(nil)
	if s.StateDir() != state {
		t.Errorf("restarted on %s, want %s", s.StateDir(), state)
	}
	if ok, why := suite.Ready(s.RT); !ok {
		t.Errorf("after Restart: %s", why)
	}
}

// TestRun: the run's folder holds its pid and goes last at Cleanup, after
// the steps deferred later; a folder of a run whose process is gone is
// swept and its id returned, a live one's is kept; Keep leaves the folder.
func TestRun(t *testing.T) {
	prefix := "ccsuite" + suite.RunID()
	r, err := suite.NewRun(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Cleanup)
	if b, err := os.ReadFile(filepath.Join(r.Dir, "pid")); err != nil || string(b) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("pid file: %q, %v", b, err)
	}

	// A dead run: its pid is that of a process that has ended.
	sh := exec.Command("/bin/true")
	if err := sh.Run(); err != nil {
		t.Fatal(err)
	}
	deadDir := filepath.Join(os.TempDir(), prefix+"-dead0001-x")
	if err := os.MkdirAll(deadDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(deadDir) })
	if err := os.WriteFile(filepath.Join(deadDir, "pid"), []byte(strconv.Itoa(sh.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if !r.Alive(r.ID) || r.Alive("dead0001") {
		t.Fatalf("Alive: own %v, dead %v", r.Alive(r.ID), r.Alive("dead0001"))
	}
	if dead := r.SweepDirs(); len(dead) != 1 || dead[0] != "dead0001" {
		t.Errorf("SweepDirs = %v, want [dead0001]", dead)
	}
	if _, err := os.Stat(deadDir); !os.IsNotExist(err) {
		t.Errorf("the dead run's folder is still there: %v", err)
	}
	if _, err := os.Stat(r.Dir); err != nil {
		t.Errorf("this run's folder was swept: %v", err)
	}

	var order []string
	r.Defer(func() {
		_, err := os.Stat(r.Dir)
		order = append(order, fmt.Sprintf("first (folder there: %v)", err == nil))
	})
	r.Defer(func() { order = append(order, "second") })
	r.Cleanup()
	r.Cleanup() // nothing left to do
	if want := []string{"second", "first (folder there: true)"}; !slices.Equal(order, want) {
		t.Errorf("Cleanup ran %q, want %q", order, want)
	}
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Errorf("the run's folder outlived Cleanup: %v", err)
	}

	kept, err := suite.NewRun(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(kept.Dir) })
	kept.Keep()
	kept.Cleanup()
	if _, err := os.Stat(kept.Dir); err != nil {
		t.Errorf("Keep: the folder is gone: %v", err)
	}
}
