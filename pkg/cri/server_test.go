package cri_test

// The harness of the RuntimeService integration tests: a real cri.Server on
// the real engine, served over gRPC on a unix socket and called through the
// generated CRI clients, exactly as kubelet or crictl call it. Nothing is
// mocked; every test names its pods uniquely and removes them, so several
// runs (and other packages' tests) can share one engine.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

const (
	// testNetwork is the pod network of every test server; it is shared
	// by all runs and left in place.
	testNetwork = suite.Network
	// testImage is the busybox image the test containers run.
	testImage = suite.Image
	// testNamespace is the pod namespace of every test pod.
	testNamespace = "cri-test"
)

// criEnv is one test's runtime: an engine, a state dir and the server
// currently serving it (restart swaps it for a new one on the same state).
type criEnv struct {
	t        *testing.T
	d        *dockerapi.Client
	stateDir string
	cfg      cri.Config      // of every server, with stateDir and the network
	reqCtx   context.Context // bounds every request of the test

	mu  sync.Mutex
	cur *suite.Server
}

// newCRIEnv starts a server on a fresh state dir. Its cleanup (registered
// first, so run last) stops whichever server is current by then.
func newCRIEnv(t *testing.T) *criEnv {
	t.Helper()
	return newCRIEnvWith(t, cri.Config{Network: testNetwork})
}

// newCRIEnvWith is newCRIEnv with servers of configuration cfg (its state
// dir is the env's).
func newCRIEnvWith(t *testing.T, cfg cri.Config) *criEnv {
	t.Helper()
	d := images.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	e := &criEnv{t: t, d: d, stateDir: t.TempDir(), reqCtx: ctx}
	cfg.StateDir = e.stateDir
	e.cfg = cfg
	t.Cleanup(func() {
		defer cancel()
		if s := e.server(); s != nil {
			s.Stop()
		}
	})
	e.start()
	return e
}

// start serves a new Server on the env's state dir and waits until Status
// says the runtime is ready.
func (e *criEnv) start() *suite.Server {
	e.t.Helper()
	s := suite.StartServer(e.t, suite.ServerOptions{Config: e.cfg})
	e.mu.Lock()
	e.cur = s
	e.mu.Unlock()
	return s
}

// restart stops the current server and starts a new one on the same state
// dir and network; between the two, down runs (the engine keeps going).
func (e *criEnv) restart(down func()) {
	e.t.Helper()
	e.server().Stop()
	if down != nil {
		down()
	}
	e.start()
}

func (e *criEnv) server() *suite.Server {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}

// rt is the RuntimeService client of the current server.
func (e *criEnv) rt() runtime.RuntimeServiceClient { return e.server().RT }

// ctx is the context of the test's requests, bounded well below the test
// timeout (cleanups use fresh ones).
func (e *criEnv) ctx() context.Context { return e.reqCtx }

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// podConfig is a pod with a unique name and uid, logging to a fresh dir.
func (e *criEnv) podConfig(name string) *runtime.PodSandboxConfig {
	suffix := randHex(4)
	return &runtime.PodSandboxConfig{
		Metadata: &runtime.PodSandboxMetadata{
			Name: name + "-" + suffix, Namespace: testNamespace, Uid: "uid-" + randHex(8), Attempt: 0,
		},
		Hostname:     name,
		LogDirectory: e.t.TempDir(),
		Labels:       map[string]string{"test": name, "run": suffix},
		Annotations:  map[string]string{"cri-compose.test/annotation": "a-" + suffix},
	}
}

// runPod runs a pod sandbox and arranges its removal when the test ends.
func (e *criEnv) runPod(cfg *runtime.PodSandboxConfig) string {
	e.t.Helper()
	e.cleanupPod(cfg)
	resp, err := e.rt().RunPodSandbox(e.ctx(), &runtime.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatalf("RunPodSandbox %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return resp.GetPodSandboxId()
}

// cleanupPod removes, when the test ends, every sandbox of the pod's
// project: through the current server (Stop then Remove, as kubelet does)
// and then, as a safety net, whatever the engine still holds.
func (e *criEnv) cleanupPod(cfg *runtime.PodSandboxConfig) {
	project := sandbox.ProjectName(cfg.GetMetadata())
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := e.d.ContainerList(ctx, sandbox.LabelProject+"="+project)
		if err != nil {
			e.t.Logf("cleanup %s: %v", project, err)
			return
		}
		if s := e.server(); s != nil {
			for _, c := range list {
				if c.Labels[sandbox.LabelType] != sandbox.TypeSandbox {
					continue
				}
				if _, err := s.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: c.ID}); err != nil {
					e.t.Logf("cleanup: StopPodSandbox %s: %v", c.ID, err)
				}
				if _, err := s.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: c.ID}); err != nil {
					e.t.Logf("cleanup: RemovePodSandbox %s: %v", c.ID, err)
				}
			}
		}
		list, _ = e.d.ContainerList(ctx, sandbox.LabelProject+"="+project)
		for _, c := range list {
			if err := e.d.ContainerRemove(ctx, c.ID); err != nil && !dockerapi.IsNotFound(err) {
				e.t.Logf("cleanup: remove %s: %v", c.ID, err)
			}
		}
	})
}

// ctrConfig is a busybox container running script with sh -c, logging to
// <name>.log in its pod's log directory.
func ctrConfig(name, script string) *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata:    &runtime.ContainerMetadata{Name: name},
		Image:       &runtime.ImageSpec{Image: testImage},
		Command:     []string{"sh", "-c", script},
		LogPath:     name + ".log",
		Labels:      map[string]string{"ctr": name},
		Annotations: map[string]string{"cri-compose.test/ctr": name},
	}
}

func (e *criEnv) createCtr(podID string, pod *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) string {
	e.t.Helper()
	resp, err := e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{
		PodSandboxId: podID, Config: cfg, SandboxConfig: pod,
	})
	if err != nil {
		e.t.Fatalf("CreateContainer %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return resp.GetContainerId()
}

func (e *criEnv) startCtr(id string) {
	e.t.Helper()
	if _, err := e.rt().StartContainer(e.ctx(), &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		e.t.Fatalf("StartContainer %s: %v", id, err)
	}
}

// runCtr creates and starts a container.
func (e *criEnv) runCtr(podID string, pod *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) string {
	e.t.Helper()
	id := e.createCtr(podID, pod, cfg)
	e.startCtr(id)
	return id
}

func (e *criEnv) podStatus(id string) *runtime.PodSandboxStatus {
	e.t.Helper()
	resp, err := e.rt().PodSandboxStatus(e.ctx(), &runtime.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		e.t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return resp.GetStatus()
}

func (e *criEnv) ctrStatus(id string) *runtime.ContainerStatus {
	e.t.Helper()
	resp, err := e.rt().ContainerStatus(e.ctx(), &runtime.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		e.t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return resp.GetStatus()
}

// waitCtrState waits until the container reports state and returns its
// status then.
func (e *criEnv) waitCtrState(id string, state runtime.ContainerState, timeout time.Duration) *runtime.ContainerStatus {
	e.t.Helper()
	var st *runtime.ContainerStatus
	suite.Eventually(e.t, fmt.Sprintf("container %.12s %s", id, state), timeout, func() (bool, string) {
		resp, err := e.rt().ContainerStatus(e.ctx(), &runtime.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return false, err.Error()
		}
		st = resp.GetStatus()
		return st.GetState() == state, st.GetState().String()
	})
	return st
}

func (e *criEnv) listPods(f *runtime.PodSandboxFilter) []*runtime.PodSandbox {
	e.t.Helper()
	resp, err := e.rt().ListPodSandbox(e.ctx(), &runtime.ListPodSandboxRequest{Filter: f})
	if err != nil {
		e.t.Fatalf("ListPodSandbox: %v", err)
	}
	return resp.GetItems()
}

func (e *criEnv) listCtrs(f *runtime.ContainerFilter) []*runtime.Container {
	e.t.Helper()
	resp, err := e.rt().ListContainers(e.ctx(), &runtime.ListContainersRequest{Filter: f})
	if err != nil {
		e.t.Fatalf("ListContainers: %v", err)
	}
	return resp.GetContainers()
}

// engineCtrs lists the engine's containers (any state) with every label.
func (e *criEnv) engineCtrs(labels ...string) []container.Summary {
	e.t.Helper()
	list, err := e.d.ContainerList(e.ctx(), labels...)
	if err != nil {
		e.t.Fatalf("engine container list %v: %v", labels, err)
	}
	return list
}

// projectDir is where the server keeps a pod's compose project.
func (e *criEnv) projectDir(project string) string {
	return filepath.Join(e.stateDir, "projects", project)
}

// wantCode checks that err is a gRPC status with code whose message holds
// every one of subs.
func wantCode(t *testing.T, err error, code codes.Code, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("error %v is not a gRPC status", err)
	}
	if st.Code() != code {
		t.Fatalf("got %s (%s), want %s", st.Code(), st.Message(), code)
	}
	for _, s := range subs {
		if !strings.Contains(st.Message(), s) {
			t.Errorf("%s message %q does not mention %q", code, st.Message(), s)
		}
	}
}

// readLog parses a CRI log file; every line must be a valid record.
func readLog(t *testing.T, path string) []crilog.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []crilog.Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		r, err := crilog.ParseLine(sc.Bytes())
		if err != nil {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		r.Content = bytes.Clone(r.Content)
		out = append(out, r)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Fatalf("%s does not end with a newline: %q", path, b)
	}
	return out
}

// logLines renders records as "<stream> <F|P> <content>".
func logLines(recs []crilog.Record) []string {
	var out []string
	for _, r := range recs {
		tag := "F"
		if r.Partial {
			tag = "P"
		}
		out = append(out, fmt.Sprintf("%s %s %s", r.Stream, tag, r.Content))
	}
	return out
}

// TestEnsureNetworkConcurrent: servers that start together on an engine
// without the pod network must end up sharing one network of that name
// (engines before API 1.44 accept duplicate names, which then makes the name
// "ambiguous" for every pod).
func TestEnsureNetworkConcurrent(t *testing.T) {
	t.Parallel()
	d := images.Engine(t)
	name := "cri-compose-test-net-" + randHex(4)
	api, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, _ := api.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
		for _, n := range r.Items {
			_ = d.NetworkRemove(ctx, n.ID)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 6
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = d.EnsureNetwork(ctx, name, dockerapi.NetworkSpec{Labels: map[string]string{"io.cri-compose.network": "test"}})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("EnsureNetwork %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("EnsureNetwork %d gave %s, another gave %s", i, ids[i], ids[0])
		}
	}
	r, err := api.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
	if err != nil {
		t.Fatal(err)
	}
	var same []string
	for _, nw := range r.Items {
		if nw.Name == name {
			same = append(same, nw.ID)
		}
	}
	if len(same) != 1 || same[0] != ids[0] {
		t.Errorf("networks named %s: %v, want only %s", name, same, ids[0])
	}
}
