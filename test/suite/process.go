package suite

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits for a process to end after its signal
// before it kills it.
const StopGrace = 20 * time.Second

// Process is one binary run as a process of its own, restartable with the
// same arguments; each start logs (stdout and stderr) to a new file
// Dir/Name.N.log (or to LogFile). It never outlives the test process.
type Process struct {
	Name string   // names its logs
	Bin  string   // the binary
	Args []string // its arguments
	Env  []string // added to the test's environment
	Dir  string   // where its logs go
	// LogFile, if set, is the log of every start instead (truncated).
	LogFile string
	// OwnGroup runs it in a process group of its own: a Ctrl-C of the
	// test then reaches the test, which stops its processes in order,
	// and not each process at once.
	OwnGroup bool

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	starts   int
	reported map[string]bool // logs whose data race was reported
}

// Start runs the process once more, with a new log file.
func (p *Process) Start() error {
	p.mu.Lock()
	p.starts++
	logPath := p.logPath(p.starts)
	p.mu.Unlock()
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: p.OwnGroup}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// Restart stops the process (SIGTERM) and starts it again.
func (p *Process) Restart() error {
	if _, err := p.Stop(syscall.SIGTERM); err != nil {
		return err
	}
	return p.Start()
}

// Stop signals the process and waits for it to end, killing it after
// StopGrace (then the error says so). It returns how the process ended,
// nil if none ran.
func (p *Process) Stop(sig syscall.Signal) (*os.ProcessState, error) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil, nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
		return cmd.ProcessState, nil
	case <-time.After(StopGrace):
		_ = cmd.Process.Kill()
		<-exited
		return cmd.ProcessState, fmt.Errorf("%s did not exit within %v of %v", p.Name, StopGrace, sig)
	}
}

// Running tells whether a start of the process has not been stopped or
// waited for.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Starts counts the process's starts.
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Exited is closed when the current run ends (nil before the first start).
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// WaitExit waits for the process to end by itself and returns how it
// ended, or nil after timeout.
func (p *Process) WaitExit(timeout time.Duration) *os.ProcessState {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		p.mu.Lock()
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		return cmd.ProcessState
	case <-time.After(timeout):
		return nil
	}
}

// Pid is the running process's pid (0 if none).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *Process) logPath(n int) string {
	if p.LogFile != "" {
		return p.LogFile
	}
	return filepath.Join(p.Dir, fmt.Sprintf("%s.%d.log", p.Name, n))
}

// LogPath is the log of the current (or last) run.
func (p *Process) LogPath() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logPath(p.starts)
}

// Log is the whole log of the current (or last) run.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath())
	return string(b)
}

// LogTail is the last n lines of the current (or last) run's log.
func (p *Process) LogTail(n int) string { return Tail(p.LogPath(), n) }

// RaceReport is the first data race that a run built with -race reported
// in a log not reported before, "" if none.
func (p *Process) RaceReport() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 1; i <= p.starts; i++ {
		path := p.logPath(i)
		if p.reported[path] {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if j := bytes.Index(b, []byte("WARNING: DATA RACE")); j >= 0 {
			if p.reported == nil {
				p.reported = map[string]bool{}
			}
			p.reported[path] = true
			return fmt.Sprintf("%s:\n%s", path, b[j:min(len(b), j+8000)])
		}
	}
	return ""
}

// ErrExited is WaitSocket's error when the process ended first.
var ErrExited = errors.New("the process exited")

// WaitSocket waits until something serves the unix socket at path, failing
// after timeout or once exited (if not nil) is closed (ErrExited).
func WaitSocket(path string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("%w before it served %s", ErrExited, path)
		default:
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served after %v", path, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Tail is the last n lines of a file, for failure messages.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
