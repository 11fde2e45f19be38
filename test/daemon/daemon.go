// Package daemon runs the built cri-compose binary for the hardening tests
// (test/fault, test/access): build once per test process, start on a
// private socket and state dir, kill, restart on the same state, and talk
// CRI to it over gRPC the way kubelet does. It also reads what a run left
// in the engine and in the state dir, for the leak checks.
package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// RunID is a short random id for the names a test process makes.
var RunID = func() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// Binary builds cmd/cri-compose once per test process (with -race when the
// tests run with it, so a data race in a crash path shows up) and returns
// its path.
func Binary() (string, error) {
	build.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			build.err = err
			return
		}
		if build.dir, err = os.MkdirTemp("", "cc-bin-"); err != nil {
			build.err = err
			return
		}
		build.bin = filepath.Join(build.dir, "cri-compose")
		args := []string{"build", "-o", build.bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/cri-compose")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build ./cmd/cri-compose: %v\n%s", err, out)
		}
	})
	return build.bin, build.err
}

// Main runs the tests and removes the built binary; call it from TestMain.
func Main(m *testing.M) int {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	return code
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cmd", "cri-compose")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (with cmd/cri-compose) not found above the test's folder")
		}
		dir = parent
	}
}

// Config is how a daemon runs.
type Config struct {
	DockerHost    string   // --docker-host ("" = the default engine)
	Network       string   // --network (default: ccf-<RunID>-<n>)
	NetworkSubnet string   // --network-subnet
	Args          []string // more flags
	NoReady       bool     // Start does not wait for RuntimeReady
	Metrics       bool     // --metrics-address on a free loopback port (Metric)
}

// Daemon is one cri-compose process, restartable on the same socket and
// state dir.
type Daemon struct {
	T        testing.TB
	Cfg      Config
	Dir      string // socket, state, logs
	Sock     string
	StateDir string
	LogDir   string // pods' log_directory

	RT  runtime.RuntimeServiceClient
	Img runtime.ImageServiceClient

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

var seq struct {
	sync.Mutex
	n int
}

// New prepares a daemon (not started). When the test ends it is stopped
// and its folder removed; removing pods and the network is the test's job
// (see Engine.Sweep).
func New(t testing.TB, cfg Config) *Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "ccf-")
	if err != nil {
		t.Fatal(err)
	}
	ownNetwork := cfg.Network == ""
	if ownNetwork {
		seq.Lock()
		seq.n++
		cfg.Network = fmt.Sprintf("ccf-%s-%d", RunID, seq.n)
		seq.Unlock()
	}
	d := &Daemon{T: t, Cfg: cfg, Dir: dir,
		Sock: filepath.Join(dir, "cri.sock"), StateDir: filepath.Join(dir, "state"), LogDir: filepath.Join(dir, "pod-logs")}
	conn, err := grpc.NewClient("unix://"+d.Sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
		if ownNetwork && d.starts > 0 { // the pod network it made, once its pods are gone
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
	bin, err := Binary()
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.starts++
	logPath := filepath.Join(d.Dir, fmt.Sprintf("cri-compose.%d.log", d.starts))
	d.mu.Unlock()
	logf, err := os.Create(logPath)
	if err != nil {
		return err
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
	cmd := exec.Command(bin, append(args, d.Cfg.Args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start cri-compose: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-exited:
			return fmt.Errorf("cri-compose exited at start (%v):\n%s", cmd.ProcessState, d.LogTail(40))
		default:
		}
		if c, err := net.DialTimeout("unix", d.Sock, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cri-compose does not serve %s after 30s:\n%s", d.Sock, d.LogTail(40))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d.Cfg.NoReady {
		return nil
	}
	return d.WaitReady(30 * time.Second)
}

// WaitReady polls Status until RuntimeReady (kubelet uses a runtime only
// then).
func (d *Daemon) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, why := d.Ready()
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) {
			return fmt.Errorf("cri-compose not ready after %v: %s\n%s", timeout, last, d.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Ready asks Status once: RuntimeReady, or why not.
func (d *Daemon) Ready() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := d.RT.Status(ctx, &runtime.StatusRequest{})
	if err != nil {
		return false, err.Error()
	}
	for _, c := range r.GetStatus().GetConditions() {
		if c.GetType() == runtime.RuntimeReady {
			return c.GetStatus(), c.GetReason() + ": " + c.GetMessage()
		}
	}
	return false, "no RuntimeReady condition"
}

// Pid is the running process's pid (0 if none).
func (d *Daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// WaitExit waits for the process to end by itself and returns how it
// ended, or nil after timeout.
func (d *Daemon) WaitExit(timeout time.Duration) *os.ProcessState {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		d.mu.Lock()
		d.cmd = nil
		d.mu.Unlock()
		return cmd.ProcessState
	case <-time.After(timeout):
		return nil
	}
}

// Stop signals the process and waits for it to end (SIGKILL after 20s).
func (d *Daemon) Stop(sig syscall.Signal) *os.ProcessState {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		d.T.Errorf("cri-compose did not exit within 20s of %v", sig)
	}
	if raceEnabled {
		if b, _ := os.ReadFile(d.lastLog()); bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			d.T.Errorf("cri-compose reported a data race:\n%s", b)
		}
	}
	return cmd.ProcessState
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

func (d *Daemon) lastLog() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return filepath.Join(d.Dir, fmt.Sprintf("cri-compose.%d.log", d.starts))
}

// Log is the whole log of the current (or last) run.
func (d *Daemon) Log() string {
	b, _ := os.ReadFile(d.lastLog())
	return string(b)
}

// LogTail is the last n lines of the current (or last) run's log.
func (d *Daemon) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(d.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

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

// WaitCRILog waits until the CRI log file of a container at path (under
// the pod's log directory, not the daemon's own log) holds want, and
// fails t with what it holds after timeout.
func WaitCRILog(t testing.TB, path, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the log %s still lacks %q; it holds:\n%s", timeout, path, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Engine is a test's view of one engine: what pods of a namespace left
// there.
type Engine struct {
	*dockerapi.Client
	api *client.Client
}

// NewEngine connects to host ("" = DOCKER_HOST or the default socket).
func NewEngine(t testing.TB, host string) *Engine {
	t.Helper()
	d, err := dockerapi.New(host)
	if err != nil {
		t.Fatal(err)
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	api, err := client.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); api.Close() })
	return &Engine{Client: d, api: api}
}

// Containers are the ids of the engine's containers (in any state) of pods
// in namespace, with their engine names.
func (e *Engine) Containers(ctx context.Context, namespace string) (map[string]string, error) {
	list, err := e.ContainerList(ctx, sandbox.LabelPodNamespace+"="+namespace)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range list {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out[c.ID] = name
	}
	return out, nil
}

// Networks counts the engine's networks named exactly name.
func (e *Engine) Networks(ctx context.Context, name string) (int, error) {
	r, err := e.api.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, nw := range r.Items {
		if nw.Name == name {
			n++
		}
	}
	return n, nil
}

// NetworkEndpoints counts the containers attached to network name.
func (e *Engine) NetworkEndpoints(ctx context.Context, name string) (int, error) {
	r, err := e.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		return 0, err
	}
	return len(r.Network.Containers), nil
}

// Sweep removes every container of namespace and the network (test
// cleanup, whatever the test did); it says what it had to remove.
func (e *Engine) Sweep(namespace, network string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var removed []string
	ids, _ := e.Containers(ctx, namespace)
	for id, name := range ids {
		if err := e.ContainerRemove(ctx, id); err == nil {
			removed = append(removed, name)
		}
	}
	if network != "" {
		removeNetwork(nil, e.Client, network)
	}
	sort.Strings(removed)
	return removed
}

// removeNetwork removes a network, waiting (up to 20s) for the engine to
// let go of endpoints of containers just removed.
func removeNetwork(t testing.TB, c *dockerapi.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for i := 0; i < 20; i++ {
		if err = c.NetworkRemove(ctx, name); err == nil || dockerapi.IsNotFound(err) {
			return
		}
		time.Sleep(time.Second)
	}
	if t != nil {
		t.Logf("network %s left in the engine: %v", name, err)
	}
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
