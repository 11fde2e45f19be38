package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/suite"
)

// daemon is one cri-compose process with its own socket, state dir and pod
// network, restartable on the same ones, and a crictl bound to it.
type daemon struct {
	t         *testing.T
	cc        *suite.Daemon
	name      string
	dir       string // under runDir: socket, crictl config, server logs
	sock      string
	stateDir  string
	network   string
	namespace string // pod namespace of every pod this test makes
	logDir    string // pods' log_directory
	crictlCfg string

	transcript strings.Builder // crictl commands of record, and their output
}

// newDaemon starts cri-compose for t. When t ends, the daemon's pods are
// removed through crictl, the daemon stops, and whatever its pods left in
// the engine (containers, the network) is removed through the Engine API.
func newDaemon(t *testing.T, name string) *daemon {
	t.Helper()
	need(t)
	if !slices.Contains(daemonNames, name) {
		t.Fatalf("newDaemon(%q): add the name to daemonNames", name)
	}
	cc := suite.NewDaemon(t, suite.DaemonConfig{
		Bin: criComposeBin, Dir: runDir, Network: "cce2e-" + runID + "-" + name, Metrics: true,
		Args: []string{"--registry-mirror", "registry.k8s.io=http://" + reg.Host},
	})
	d := &daemon{
		t: t, cc: cc, name: name, dir: cc.Dir, sock: cc.Sock, stateDir: cc.StateDir, logDir: cc.LogDir,
		network:   cc.Cfg.Network,
		namespace: "e2e-" + runID + "-" + name,
		crictlCfg: filepath.Join(cc.Dir, "crictl.yaml"),
	}
	cfg := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 120\ndebug: false\npull-image-on-create: false\n",
		d.endpoint(), d.endpoint())
	if err := os.WriteFile(d.crictlCfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.cleanup)
	d.start()
	return d
}

func (d *daemon) endpoint() string { return d.cc.Endpoint() }

// start runs cri-compose and waits until it reports RuntimeReady (like
// kubelet, use the runtime only once it has read the engine's pods back)
// and answers crictl version.
func (d *daemon) start() {
	d.t.Helper()
	d.cc.Start()
	if _, err := d.crictlQuiet("version"); err != nil {
		d.t.Fatalf("crictl version after start: %v\n%s", err, d.cc.LogTail(40))
	}
}

// stop signals cri-compose and waits for it to exit. After SIGTERM it must
// exit cleanly (status 0) within 20s.
func (d *daemon) stop(sig syscall.Signal) {
	d.t.Helper()
	st := d.cc.Stop(sig)
	if sig == syscall.SIGTERM && st != nil && !st.Success() {
		d.t.Errorf("cri-compose exited with %v after SIGTERM:\n%s", st, d.cc.LogTail(30))
	}
}

// cleanup removes the test's pods through crictl while the daemon runs,
// stops it, and then removes anything left in the engine for its pod
// namespace, and its network.
func (d *daemon) cleanup() {
	if d.cc.Proc.Running() {
		if out, err := d.crictlQuiet("pods", "-q", "--namespace", d.namespace); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = d.crictlQuiet("stopp", id)
				if _, err := d.crictlQuiet("rmp", id); err != nil {
					d.t.Logf("cleanup: crictl rmp %s: %v", id, err)
				}
			}
		}
		d.stop(syscall.SIGTERM)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	left, err := engine.ContainerList(ctx, "io.kubernetes.pod.namespace="+d.namespace)
	if err != nil {
		d.t.Logf("cleanup: list containers: %v", err)
	}
	for _, c := range left {
		d.t.Logf("cleanup: removing container %s (%v) left in the engine", c.ID[:12], c.Names)
		if err := engine.ContainerRemove(ctx, c.ID); err != nil && !dockerapi.IsNotFound(err) {
			d.t.Logf("cleanup: remove container %s: %v", c.ID[:12], err)
		}
	}
	if err := engine.NetworkRemove(ctx, d.network); err != nil && !dockerapi.IsNotFound(err) {
		d.t.Logf("cleanup: remove network %s: %v", d.network, err)
	}
}

// crictl runs crictl against the daemon. The command and its output go to
// the transcript. It fails the test on error.
func (d *daemon) crictl(args ...string) string {
	d.t.Helper()
	return d.crictlRecord(true, args...)
}

// note adds a line to the transcript: what the test read or did.
func (d *daemon) note(format string, args ...any) {
	fmt.Fprintf(&d.transcript, "  # "+format+"\n", args...)
}

// crictlRecord is crictl that keeps its output in the transcript, or only
// the number of its lines unless whole.
func (d *daemon) crictlRecord(whole bool, args ...string) string {
	d.t.Helper()
	stdout, stderr, err := d.runCrictl(args...)
	fmt.Fprintf(&d.transcript, "$ crictl %s\n", strings.Join(args, " "))
	if out := strings.TrimRight(stdout, "\n"); out != "" {
		if !whole {
			out = fmt.Sprintf("(%d lines of JSON)", strings.Count(out, "\n")+1)
		}
		d.transcript.WriteString(indent(out))
	}
	if stderr != "" {
		d.transcript.WriteString(indent("[stderr] " + stderr))
	}
	if err != nil {
		d.t.Fatalf("crictl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout
}

// crictlJSON runs crictl CMD -o json ARGS… and decodes its output; the
// transcript only counts its lines (the tests note what they read in it).
func (d *daemon) crictlJSON(v any, args ...string) {
	d.t.Helper()
	full := append([]string{args[0], "-o", "json"}, args[1:]...)
	out := d.crictlRecord(false, full...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		d.t.Fatalf("crictl %s: decode output: %v\n%s", strings.Join(full, " "), err, out)
	}
}

// crictlQuiet runs crictl outside the transcript (polling, cleanup) and
// returns its stdout; the error carries stderr.
func (d *daemon) crictlQuiet(args ...string) (string, error) {
	stdout, stderr, err := d.runCrictl(args...)
	if err != nil {
		return stdout, fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

func (d *daemon) runCrictl(args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	full := append([]string{"--config", d.crictlCfg,
		"--runtime-endpoint", d.endpoint(), "--image-endpoint", d.endpoint()}, args...)
	cmd := exec.CommandContext(ctx, crictlBin, full...)
	cmd.Dir = d.dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// writeJSON writes v as JSON to a file in the daemon's dir and returns its path.
func (d *daemon) writeJSON(name string, v any) string {
	d.t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		d.t.Fatal(err)
	}
	p := filepath.Join(d.dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		d.t.Fatal(err)
	}
	return p
}

// podConfig is a pod sandbox config with a unique name and uid in the
// daemon's namespace.
func (d *daemon) podConfig(name string) map[string]any {
	return map[string]any{
		"metadata": map[string]any{
			"name": name, "namespace": d.namespace,
			"uid": "uid-" + runID + "-" + d.name + "-" + name, "attempt": 0,
		},
		"hostname":      name,
		"log_directory": d.logDir,
		"labels":        map[string]string{"e2e-run": runID},
	}
}

// docker runs the docker CLI (with the test's DOCKER_CONFIG, so `docker
// compose` is the v2 plugin) in dir and returns stdout.
func docker(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := dockerE(dir, "docker", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dockerE(dir, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = dockerEnv(dockerConfig)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return o.String(), fmt.Errorf("%s %s: %w\nstdout: %s\nstderr: %s", bin, strings.Join(args, " "), err, o.String(), e.String())
	}
	return o.String(), nil
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
