package cri_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/events"
	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/dockerapi/dockertest"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// These tests drive the handlers and the recovery on dockertest's engine:
// the mapping, the codes and the order of the clean-ups, without Docker.
// The real engine's suites (server_test.go, test/e2e) remain the proof.

// fakeEngine is dockertest's engine where a Server needs an Engine. What
// the fake lacks (exec, stats, volumes, streams) comes from the nil Engine
// one level deeper: a test that reaches it panics, and the stack names the
// method, rather than passing on an answer nobody wrote.
type fakeEngine struct {
	*dockertest.Engine
	missing
}

type missing struct{ cri.Engine }

const fakeInfra = "registry.k8s.io/pause:3.10"

// fakeServer is a server of stateDir on engine e, as the program makes it
// but not running: the test calls Resync and HandleEvent itself.
func fakeServer(t *testing.T, e *dockertest.Engine, stateDir string) *cri.Server {
	t.Helper()
	s, stop := cri.NewFakeServer(cri.Config{StateDir: stateDir, Network: "cc-fake", PodInfraImage: fakeInfra, StreamAddress: "127.0.0.1:0"},
		fakeEngine{Engine: e}, dockertest.NewEvents())
	t.Cleanup(stop)
	return s
}

func newFakeEngine() *dockertest.Engine {
	e := dockertest.New()
	e.AddImage(fakeInfra, "sha256:"+strings.Repeat("9", 64))
	return e
}

func fakePod(t *testing.T, name string) *runtime.PodSandboxConfig {
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: "fake", Uid: "uid-" + name},
		Hostname:     name,
		LogDirectory: t.TempDir(),
		Labels:       map[string]string{"app": name},
	}
}

func runFake(t *testing.T, s *cri.Server, cfg *runtime.PodSandboxConfig) string {
	t.Helper()
	r, err := s.RunPodSandbox(context.Background(), &runtime.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return r.GetPodSandboxId()
}

// TestRunPodSandboxFake: a pod sandbox is an infra container with the
// Compose project's labels, on the pod network, running, with its compose
// file written; the runtime reports it as asked. The same pod again is
// AlreadyExists; a start the engine refuses leaves neither a container nor
// a folder, and says Unavailable, so that kubelet retries.
func TestRunPodSandboxFake(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine()
	s := fakeServer(t, e, t.TempDir())
	cri.Resync(ctx, s) // as Run does first
	cfg := fakePod(t, "web")
	id := runFake(t, s, cfg)
	project := sandbox.ProjectName(cfg.GetMetadata())

	c, ok := e.Containers()[id]
	if !ok || !c.State.Running {
		t.Fatalf("engine's infra container %s: present %v, state %+v", id, ok, c.State)
	}
	for k, want := range map[string]string{
		sandbox.LabelProject: project, sandbox.LabelType: sandbox.TypeSandbox, sandbox.LabelOneoff: "False",
		sandbox.LabelPodName: "web", sandbox.LabelPodNamespace: "fake", sandbox.LabelPodUID: "uid-web",
	} {
		if got := c.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if c.Config.Image != fakeInfra {
		t.Errorf("infra image %q, want %q", c.Config.Image, fakeInfra)
	}
	if n, ok := e.Network("cc-fake"); !ok || n.Labels["io.cri-compose.network"] != "pods" {
		t.Errorf("pod network: made %v, labels %v", ok, n.Labels)
	}
	if _, err := os.Stat(filepath.Join(cri.ProjectDir(s, project), "compose.yaml")); err != nil {
		t.Errorf("compose file: %v", err)
	}

	st, err := s.PodSandboxStatus(ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if st.GetStatus().GetState() != runtime.PodSandboxState_SANDBOX_READY || st.GetStatus().GetMetadata().GetName() != "web" ||
		st.GetStatus().GetLabels()["app"] != "web" {
		t.Errorf("status: %v", st.GetStatus())
	}

	_, err = s.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: cfg})
	wantCode(t, err, codes.AlreadyExists, id)

	e.Fail(dockertest.OpStart, "", dockertest.ErrUnavailable)
	bad := fakePod(t, "nostart")
	_, err = s.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: bad})
	wantCode(t, err, codes.Unavailable, "start pod sandbox")
	e.Fail(dockertest.OpStart, "", nil)
	for _, c := range e.Containers() {
		if c.Config.Labels[sandbox.LabelPodName] == "nostart" {
			t.Errorf("a failed start left container %s", c.Name)
		}
	}
	if _, err := os.Stat(cri.ProjectDir(s, sandbox.ProjectName(bad.GetMetadata()))); !os.IsNotExist(err) {
		t.Errorf("a failed start left its project folder: %v", err)
	}
	l, err := s.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
	if err != nil || len(l.GetItems()) != 1 || l.GetItems()[0].GetId() != id {
		t.Errorf("ListPodSandbox = %v, %v; want only %s", l.GetItems(), err, id)
	}
}

// TestRecoveryFake: a server restarted on the same state dir finds its
// pods on the engine (and not another state dir's), removes the folder of
// a pod the engine lost, and says it is synced only after that. When the
// engine cannot list, nothing is swept: a folder of a pod it could not
// read is not a pod's that is gone.
func TestRecoveryFake(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine()
	dir := t.TempDir()
	first := fakeServer(t, e, dir)
	keep := runFake(t, first, fakePod(t, "keep"))
	lostCfg := fakePod(t, "lost")
	lost := runFake(t, first, lostCfg)
	lostDir := cri.ProjectDir(first, sandbox.ProjectName(lostCfg.GetMetadata()))
	other := runFake(t, fakeServer(t, e, t.TempDir()), fakePod(t, "other"))
	e.Remove(lost) // the engine lost it while no runtime ran

	// The engine cannot list at the restart: nothing is read, nothing swept.
	s := fakeServer(t, e, dir)
	e.Fail(dockertest.OpList, "", dockertest.ErrUnavailable)
	cri.Resync(ctx, s)
	if cri.Synced(s) {
		t.Error("synced after a resync that could not list")
	}
	if _, err := os.Stat(lostDir); err != nil {
		t.Errorf("a resync that read nothing swept a project folder: %v", err)
	}
	e.Fail(dockertest.OpList, "", nil)

	// One sandbox cannot be inspected: the others are read, nothing swept.
	e.Fail(dockertest.OpInspect, keep, dockertest.ErrUnavailable)
	cri.Resync(ctx, s)
	keepDir := filepath.Join(dir, "projects", projectOf(t, e, keep))
	if _, err := os.Stat(keepDir); err != nil {
		t.Errorf("the folder of a pod the engine could not inspect was swept: %v", err)
	}
	e.Fail(dockertest.OpInspect, keep, nil)

	// The engine answers: ours back, the lost pod's folder gone, synced.
	cri.Resync(ctx, s)
	if !cri.Synced(s) {
		t.Error("not synced after a full resync")
	}
	l, err := s.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range l.GetItems() {
		ids = append(ids, sb.GetId())
	}
	if !slices.Equal(ids, []string{keep}) {
		t.Errorf("after the restart the runtime lists %v, want only %s (not the lost %s nor the other state dir's %s)", ids, keep, lost, other)
	}
	if _, err := os.Stat(lostDir); !os.IsNotExist(err) {
		t.Errorf("the lost pod's folder is still there: %v", err)
	}
	if _, err := os.Stat(keepDir); err != nil {
		t.Errorf("the live pod's folder: %v", err)
	}
}

func projectOf(t *testing.T, e *dockertest.Engine, id string) string {
	t.Helper()
	c, ok := e.Containers()[id]
	if !ok {
		t.Fatalf("no container %s", id)
	}
	return c.Config.Labels[sandbox.LabelProject]
}

// TestHandleEventFake: an event of another state dir's pod costs no
// inspect; an event that changes nothing CRI reports (exec_start) neither;
// a die of ours is read back, and the pod is reported not ready.
func TestHandleEventFake(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine()
	s := fakeServer(t, e, t.TempDir())
	cri.Resync(ctx, s)
	id := runFake(t, s, fakePod(t, "ev"))
	other := runFake(t, fakeServer(t, e, t.TempDir()), fakePod(t, "foreign"))
	inspects := func() (n int) {
		for _, c := range e.Calls() {
			if c.Op == dockertest.OpInspect {
				n++
			}
		}
		return n
	}
	event := func(cid, action string) dockerapi.Event {
		return dockerapi.Event{Action: events.Action(action), ID: cid, Attributes: e.Containers()[cid].Config.Labels}
	}

	before := inspects()
	cri.HandleEvent(ctx, s, event(other, "die"))
	cri.HandleEvent(ctx, s, event(id, "exec_start"))
	if n := inspects() - before; n != 0 {
		t.Errorf("a foreign pod's event and an exec_start cost %d inspects, want 0", n)
	}

	e.Exit(id, 137, false)
	cri.HandleEvent(ctx, s, event(id, "die"))
	if n := inspects() - before; n != 1 {
		t.Errorf("our die cost %d inspects, want 1", n)
	}
	st, err := s.PodSandboxStatus(ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetState(); got != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after its infra container died the pod is %s, want NOTREADY", got)
	}
}
