package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

const busybox = "localhost/cri-compose/test-busybox:bench"

// benchEnv is what every benchmark of the run shares: set up once.
type benchEnv struct {
	d         *dockerapi.Client
	repoRoot  string
	network   string // the pod network of every path
	namespace string // the CRI namespace of every pod: ccb-<run>
	bin       string // cri-compose, built by this run

	composeCmd  []string // `docker compose` (v2) or `docker-compose` (v1); nil: no compose path
	composeEnv  []string
	composeName string // "docker compose v2.x" / "docker-compose 1.x"
	composeWhy  string // why there is no compose path

	machine []string // the machine, for the summary
}

var (
	envOnce sync.Once
	theEnv  *benchEnv
	envErr  error
	envSkip string
)

// setup prepares the run once: engine, images, network, the cri-compose
// binary and the compose CLI. Without an engine it skips b (fails it in
// CI).
func setup(b *testing.B) *benchEnv {
	b.Helper()
	envOnce.Do(func() { theEnv, envSkip, envErr = newEnv() })
	if envSkip != "" {
		images.SkipOrFail(b, "%s", envSkip)
	}
	if envErr != nil {
		b.Fatal(envErr)
	}
	return theEnv
}

func newEnv() (*benchEnv, string, error) {
	root, err := suite.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	d, err := dockerapi.New("")
	if err != nil {
		return nil, "", err
	}
	atExit(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = d.Ping(pctx)
	pcancel()
	if err != nil {
		return nil, fmt.Sprintf("no Docker engine answers at %s (make ensure-docker starts one): %v", d.Host(), err), nil
	}
	e := &benchEnv{d: d, repoRoot: root, network: "ccb-" + runID, namespace: "ccb-" + runID}
	sweepStaleRuns(d)

	// The binary and the compose CLI build while the engine is prepared.
	var wg sync.WaitGroup
	var buildErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		// Without -race whatever the tests run with: it is what is measured.
		e.bin, buildErr = suite.Binary("cri-compose", false)
	}()
	go func() { defer wg.Done(); e.findCompose(ctx) }()

	err = images.Busybox(ctx, d, busybox)
	if errors.Is(err, images.ErrNoBusybox) {
		wg.Wait()
		return nil, err.Error(), nil
	}
	if err == nil {
		err = pause.Ensure(ctx, d)
	}
	if err == nil {
		_, err = d.EnsureNetwork(ctx, e.network, dockerapi.NetworkSpec{Labels: map[string]string{"io.cri-compose.bench": runID}})
	}
	if err != nil {
		wg.Wait()
		return nil, "", err
	}
	atExit(func() {
		ctx, cancel := ctxTimeout(time.Minute)
		defer cancel()
		if err := d.NetworkRemove(ctx, e.network); err != nil && !dockerapi.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "[bench] cleanup: network %s: %v\n", e.network, err)
		}
	})
	// Registered after the network: runs before its removal.
	atExit(func() { removeNamespace(d, e.namespace) })
	wg.Wait()
	if buildErr != nil {
		return nil, "", fmt.Errorf("build cri-compose: %w", buildErr)
	}
	e.machine = machineInfo(ctx, d, e)
	return e, "", nil
}

// findCompose picks the compose CLI of -bench.compose.
func (e *benchEnv) findCompose(ctx context.Context) {
	mode := *flagCompose
	if mode == "off" {
		e.composeWhy = "-bench.compose=off"
		return
	}
	if mode == "auto" || mode == "v2" {
		bin, took, err := toolcache.Compose(ctx, e.repoRoot)
		if err == nil {
			if took > 0 {
				fmt.Fprintf(os.Stderr, "[bench] built %s in %v (cached for later runs)\n", bin, took.Round(time.Millisecond))
			}
			cfg := filepath.Join(runDir, "docker-config")
			if err = os.MkdirAll(cfg, 0o700); err == nil {
				var v string
				if v, err = toolcache.InstallComposePlugin(ctx, cfg, bin); err == nil {
					e.composeCmd, e.composeEnv, e.composeName = []string{"docker", "compose"}, toolcache.DockerEnv(cfg), "docker compose "+v
					return
				}
			}
		}
		e.composeWhy = fmt.Sprintf("no Compose v2: %v", err)
		if mode == "v2" {
			return
		}
		fmt.Fprintf(os.Stderr, "[bench] %s; trying docker-compose (v1)\n", e.composeWhy)
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		out, err := exec.CommandContext(ctx, p, "version", "--short").Output()
		if err == nil {
			e.composeCmd, e.composeEnv, e.composeName = []string{p}, os.Environ(), "docker-compose "+strings.TrimSpace(string(out))
			return
		}
		e.composeWhy += fmt.Sprintf("; docker-compose version: %v", err)
	} else {
		e.composeWhy += "; no docker-compose (v1) on PATH"
	}
}

// removeNamespace force-removes every container of the run's pods (all
// three paths label theirs with the namespace), a few at a time.
func removeNamespace(d *dockerapi.Client, ns string) {
	ctx, cancel := ctxTimeout(15 * time.Minute)
	defer cancel()
	list, err := d.ContainerList(ctx, sandbox.LabelPodNamespace+"="+ns)
	if err != nil {
		fmt.Fprintf(os.Stderr, "[bench] cleanup: list containers of %s: %v\n", ns, err)
		return
	}
	ids := make([]string, len(list))
	for i, c := range list {
		ids[i] = c.ID
	}
	removeAll(ctx, d, ids)
}

// removeAll force-removes containers, 8 at a time.
func removeAll(ctx context.Context, d *dockerapi.Client, ids []string) {
	if len(ids) > 20 {
		fmt.Fprintf(os.Stderr, "[bench] removing %d containers\n", len(ids))
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := d.ContainerRemove(ctx, id); err != nil && !dockerapi.IsNotFound(err) {
				fmt.Fprintf(os.Stderr, "[bench] cleanup: remove %.12s: %v\n", id, err)
			}
		}()
	}
	wg.Wait()
}

// sweepStaleRuns removes what runs that died before their cleanup (killed,
// timed out) left: their containers, networks and folders.
func sweepStaleRuns(d *dockerapi.Client) {
	ctx, cancel := ctxTimeout(10 * time.Minute)
	defer cancel()
	list, err := d.ContainerList(ctx, sandbox.LabelPodNamespace)
	if err != nil {
		return
	}
	dead := map[string]bool{} // run id -> its process is gone
	var ids []string
	for _, c := range list {
		id, ok := strings.CutPrefix(c.Labels[sandbox.LabelPodNamespace], "ccb-")
		if !ok || id == runID {
			continue
		}
		isDead, seen := dead[id]
		if !seen {
			isDead = !benchRun.Alive(id)
			dead[id] = isDead
		}
		if isDead {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) > 0 {
		fmt.Fprintf(os.Stderr, "[bench] removing %d containers left by runs that died\n", len(ids))
		removeAll(ctx, d, ids)
	}
	// Networks: through the CLI, the engine client lists none.
	if out, err := exec.CommandContext(ctx, "docker", "network", "ls", "--format", "{{.Name}}", "--filter", "name=ccb-").Output(); err == nil {
		for _, name := range strings.Fields(string(out)) {
			if id, ok := strings.CutPrefix(name, "ccb-"); ok && !benchRun.Alive(id) {
				_ = d.NetworkRemove(ctx, name)
			}
		}
	}
	benchRun.SweepDirs()
}

// machineInfo describes the machine and the software measured.
func machineInfo(ctx context.Context, d *dockerapi.Client, e *benchEnv) []string {
	var out []string
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					mem = fmt.Sprintf("%.1f GiB", kb/1024/1024)
				}
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	out = append(out, fmt.Sprintf("machine: %d CPUs (%s), %s memory, kernel %s", runtime.NumCPU(), cpu, mem, strings.TrimSpace(string(kernel))))
	if v, err := d.ServerVersion(ctx); err == nil {
		out = append(out, fmt.Sprintf("engine: Docker %s (API %s), containerd and runc of the engine's packages", v.Version, v.APIVersion))
	}
	rev := "?"
	if o, err := exec.CommandContext(ctx, "git", "-C", e.repoRoot, "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		rev = strings.TrimSpace(string(o))
		if exec.CommandContext(ctx, "git", "-C", e.repoRoot, "diff", "--quiet", "HEAD", "--", "pkg", "cmd").Run() != nil {
			rev += " (with local changes)"
		}
	}
	out = append(out, fmt.Sprintf("cri-compose: %s, built by %s; compose CLI: %s", rev, runtime.Version(), orNone(e.composeName, e.composeWhy)))
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			out = append(out, fmt.Sprintf("load average at start: %s %s %s", f[0], f[1], f[2]))
		}
	}
	return out
}

func orNone(s, why string) string {
	if s != "" {
		return s
	}
	return "none (" + why + ")"
}

// run runs a command and returns its combined output in the error.
func run(ctx context.Context, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	return nil
}
