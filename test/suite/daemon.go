package suite

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// DaemonConfig is how a Daemon runs.
type DaemonConfig struct {
	Bin           string   // the binary (default: cmd/cri-compose, built by Binary)
	Dir           string   // where its folder is made (default: the temp dir)
	DockerHost    string   // --docker-host ("" = the default engine)
	Network       string   // --network (default: ccf-<RunID>-<n>, removed at the end)
	NetworkSubnet string   // --network-subnet
	Args          []string // more flags (a later -v wins over the default -v=2)
	NoReady       bool     // Start does not wait for RuntimeReady
	ReadyTimeout  time.Duration
	Metrics       bool // --metrics-address on a free loopback port (Metric)
	// GRPC are more options of the client (RT, Img).
	GRPC []grpc.DialOption
}

// Daemon is cri-compose run as a process of its own (a Process),
// restartable on the same socket and state dir, with CRI clients on its
// socket that talk to it the way kubelet does.
type Daemon struct {
	T        testing.TB
	Cfg      DaemonConfig
	Dir      string // socket, state, logs
	Sock     string
	StateDir string
	LogDir   string // pods' log_directory
	Proc     *Process

	RT  runtime.RuntimeServiceClient
	Img runtime.ImageServiceClient
}

var networkSeq struct {
	sync.Mutex
	n int
}

// NewDaemon prepares a daemon (not started). When the test ends it is
// stopped and its folder removed; removing pods and the network it was
// given is the test's job (see Engine.Sweep).
func NewDaemon(t testing.TB, cfg DaemonConfig) *Daemon {
	t.Helper()
	dir, err := os.MkdirTemp(cfg.Dir, "ccf-")
	if err != nil {
		t.Fatal(err)
	}
	ownNetwork := cfg.Network == ""
	if ownNetwork {
		networkSeq.Lock()
		networkSeq.n++
		cfg.Network = fmt.Sprintf("ccf-%s-%d", RunID(), networkSeq.n)
		networkSeq.Unlock()
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	d := &Daemon{T: t, Cfg: cfg, Dir: dir,
		Sock: filepath.Join(dir, "cri.sock"), StateDir: filepath.Join(dir, "state"), LogDir: filepath.Join(dir, "pod-logs"),
		Proc: &Process{Name: "cri-compose", Bin: cfg.Bin, Dir: dir}}
	conn, err := Dial(d.Endpoint(), cfg.GRPC...)
	if err != nil {
		t.Fatal(err)
	}
	d.RT, d.Img = runtime.NewRuntimeServiceClient(conn), runtime.NewImageServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		d.Stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("cri-compose log (last run):\n%s", d.LogTail(80))
		}
		os.RemoveAll(dir)
		if ownNetwork && d.Proc.Starts() > 0 { // the pod network it made, once its pods are gone
			if eng, err := dockerapi.New(cfg.DockerHost); err == nil {
				removeNetwork(t, eng, cfg.Network)
				eng.Close()
			}
		}
	})
	return d
}

// Endpoint is the daemon's CRI endpoint.
func (d *Daemon) Endpoint() string { return "unix://" + d.Sock }

// Start runs the binary with env added to the test's environment (e.g.
// the failpoint) and waits until it serves the socket and, unless
// Cfg.NoReady, reports RuntimeReady.
func (d *Daemon) Start(env ...string) {
	d.T.Helper()
	if err := d.StartErr(env...); err != nil {
		d.T.Fatal(err)
	}
}

// StartErr is Start returning its error.
func (d *Daemon) StartErr(env ...string) error {
	p := d.Proc
	if p.Bin == "" {
		bin, err := Binary("cri-compose", RaceEnabled)
		if err != nil {
			return err
		}
		p.Bin = bin
	}
	args := []string{"--listen", d.Endpoint(), "--state-dir", d.StateDir, "--network", d.Cfg.Network, "-v=2"}
	if d.Cfg.DockerHost != "" {
		args = append(args, "--docker-host", d.Cfg.DockerHost)
	}
	if d.Cfg.NetworkSubnet != "" {
		args = append(args, "--network-subnet", d.Cfg.NetworkSubnet)
	}
	if d.Cfg.Metrics {
		args = append(args, "--metrics-address", "127.0.0.1:0")
	}
	args = append(args, d.Cfg.Args...)
	p.Args, p.Env = args, env
	if err := p.Start(); err != nil {
		return err
	}
	if err := WaitSocket(d.Sock, 30*time.Second, p.Exited()); errors.Is(err, ErrExited) {
		return fmt.Errorf("cri-compose exited at start (%v):\n%s", p.WaitExit(time.Second), d.LogTail(40))
	} else if err != nil {
		return fmt.Errorf("cri-compose: %w:\n%s", err, d.LogTail(40))
	}
	if d.Cfg.NoReady {
		return nil
	}
	return d.WaitReady(d.Cfg.ReadyTimeout)
}

// WaitReady polls Status until RuntimeReady (kubelet uses a runtime only
// then).
func (d *Daemon) WaitReady(timeout time.Duration) error {
	if err := WaitReady(d.RT, timeout); err != nil {
		return fmt.Errorf("cri-compose: %w\n%s", err, d.LogTail(40))
	}
	return nil
}

// WaitReadyIs polls Status until RuntimeReady is want (false: the
// runtime has seen its engine go away), failing the test after timeout.
func (d *Daemon) WaitReadyIs(want bool, timeout time.Duration) {
	d.T.Helper()
	err := Poll(fmt.Sprintf("Status RuntimeReady %v", want), timeout, func() (bool, string) {
		ok, why := d.Ready()
		return ok == want, why
	})
	if err != nil {
		d.T.Fatalf("%v\n%s", err, d.LogTail(30))
	}
}

// Ready asks Status once: RuntimeReady, or why not.
func (d *Daemon) Ready() (bool, string) { return Ready(d.RT) }

// Pid is the running process's pid (0 if none).
func (d *Daemon) Pid() int { return d.Proc.Pid() }

// WaitExit waits for the process to end by itself and returns how it
// ended, or nil after timeout.
func (d *Daemon) WaitExit(timeout time.Duration) *os.ProcessState { return d.Proc.WaitExit(timeout) }

// Stop signals the process and waits for it to end (SIGKILL after
// StopGrace, an error of the test). A data race that a -race build
// reported fails the test.
func (d *Daemon) Stop(sig syscall.Signal) *os.ProcessState {
	st, err := d.Proc.Stop(sig)
	if err != nil {
		d.T.Error(err)
	}
	if r := d.Proc.RaceReport(); r != "" {
		d.T.Errorf("cri-compose reported a data race (%s)", r)
	}
	return st
}

// KilledBySIGKILL reports whether st is the end of a process killed by
// SIGKILL.
func KilledBySIGKILL(st *os.ProcessState) bool {
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Log is the whole log of the current (or last) run.
func (d *Daemon) Log() string { return d.Proc.Log() }

// LogTail is the last n lines of the current (or last) run's log.
func (d *Daemon) LogTail(n int) string { return d.Proc.LogTail(n) }

// ProjectFolders lists the project folders under the state dir.
func (d *Daemon) ProjectFolders() []string {
	return ProjectFolders(d.StateDir)
}

// ProjectFolders lists the project folders under a state dir, sorted.
func ProjectFolders(stateDir string) []string {
	entries, _ := os.ReadDir(filepath.Join(stateDir, "projects"))
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// metricsURL is where the current run serves its metrics, from its log.
var metricsURL = regexp.MustCompile(`"Serving metrics" url="([^"]+)"`)

// Metrics scrapes the current run (Cfg.Metrics): the metric families by
// name.
func (d *Daemon) Metrics() (map[string]*dto.MetricFamily, error) {
	m := metricsURL.FindStringSubmatch(d.Log())
	if m == nil {
		return nil, errors.New("cri-compose serves no metrics (Config.Metrics) or has not said where yet")
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(m[1])
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", m[1], resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// Metric is the sum of every series of one counter or gauge of the
// current run.
func (d *Daemon) Metric(name string) (float64, error) {
	fams, err := d.Metrics()
	if err != nil {
		return 0, err
	}
	f, ok := fams[name]
	if !ok {
		return 0, fmt.Errorf("no metric %s", name)
	}
	v := 0.0
	for _, m := range f.GetMetric() {
		v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
	}
	return v, nil
}
