package store_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/store"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/dockerapi/dockertest"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// A pod's containers as the runtime makes them (pkg/sandbox's specs, so
// their labels are the real ones), on a fake engine.
type pods struct {
	t    *testing.T
	eng  *dockertest.Engine
	host sandbox.Host
}

func newPods(t *testing.T, eng *dockertest.Engine, stateDir string) *pods {
	return &pods{t: t, eng: eng, host: sandbox.Host{Network: "pods", InfraImage: "pause", StateDir: stateDir,
		LogConfig: container.LogConfig{Type: "json-file"}}}
}

func (p *pods) config(name string) *runtime.PodSandboxConfig {
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: "ns", Uid: name + "-uid"},
		LogDirectory: filepath.Join("/var/log/pods", "ns_"+name+"_"+name+"-uid"),
	}
}

// sandbox creates a pod's infra container; started says whether it runs.
func (p *pods) sandbox(cfg *runtime.PodSandboxConfig, started bool) string {
	p.t.Helper()
	spec, err := sandbox.SandboxSpec(cfg, p.host)
	return p.create(spec, err, started, 100)
}

// create makes spec's container on the engine, started with pid if asked.
func (p *pods) create(spec *sandbox.Spec, err error, started bool, pid int) string {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
	id := p.eng.Create(spec.Name, spec.Config, spec.HostConfig)
	if started {
		p.eng.Start(id, pid)
	}
	return id
}

// container creates a CRI container in the pod, started if asked.
func (p *pods) container(sbID string, sb *runtime.PodSandboxConfig, name string, started bool) string {
	p.t.Helper()
	spec, err := sandbox.ContainerSpec(sandbox.ContainerInput{SandboxID: sbID, Sandbox: sb, ImageID: "sha256:img", ImageRef: "busybox:latest",
		Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: name}, Image: &runtime.ImageSpec{Image: "busybox"},
			LogPath: name + "/0.log"}}, p.host)
	return p.create(spec, err, started, 200)
}

// filledStore is a store of p's state dir on p's engine, filled from it.
func (p *pods) filledStore(ctx context.Context) *store.Store {
	p.t.Helper()
	s := store.New(p.eng, store.Options{ProjectsDir: p.host.ProjectDir("")})
	if _, err := s.Resync(ctx); err != nil {
		p.t.Fatal(err)
	}
	return s
}

func ids[R any](rs []R, id func(R) string) []string {
	var out []string
	for _, r := range rs {
		out = append(out, id(r))
	}
	slices.Sort(out)
	return out
}

func sandboxIDs(s *store.Store) []string {
	return ids(s.Sandboxes(nil), func(sb store.Sandbox) string { return sb.ID })
}

func containerIDs(s *store.Store) []string {
	return ids(s.Containers(nil), func(c store.Container) string { return c.ID })
}

func sorted(ids ...string) []string { return slices.Sorted(slices.Values(ids)) }

// TestResync: a restarted runtime rebuilds its store from the engine alone.
// It reads its own pods (sandboxes before their containers, so a container
// never points at an unknown pod), leaves another state dir's pods alone,
// and drops what it held that the engine lost meanwhile.
func TestResync(t *testing.T) {
	ctx := context.Background()
	eng := dockertest.New()
	ours, theirs := newPods(t, eng, t.TempDir()), newPods(t, eng, t.TempDir())
	web := ours.config("web")
	sbWeb := ours.sandbox(web, true)
	app := ours.container(sbWeb, web, "app", true)
	side := ours.container(sbWeb, web, "side", false)
	done := ours.config("done")
	sbDone := ours.sandbox(done, false)
	other := theirs.config("web")
	sbOther := theirs.sandbox(other, true)
	theirs.container(sbOther, other, "app", true)

	var changes []string
	s := store.New(eng, store.Options{ProjectsDir: ours.host.ProjectDir(""),
		OnContainer: func(old, cur *store.Container) {
			if old == nil {
				changes = append(changes, "add "+cur.ID)
			}
		}})
	// What the store held before: a container the engine removed since.
	gone := ours.container(sbWeb, web, "gone", true)
	if err := s.Refresh(ctx, gone); err != nil {
		t.Fatal(err)
	}
	eng.Remove(gone)

	readAll, err := s.Resync(ctx)
	if !readAll || err != nil {
		t.Fatalf("Resync = %v, %v; want every pod read", readAll, err)
	}
	if got, want := sandboxIDs(s), sorted(sbWeb, sbDone); !slices.Equal(got, want) {
		t.Errorf("sandboxes %v, want %v (ours only)", got, want)
	}
	if got, want := containerIDs(s), sorted(app, side); !slices.Equal(got, want) {
		t.Errorf("containers %v, want %v (ours, and not the one removed)", got, want)
	}
	// Every sandbox was inspected before the first container.
	var inspected []string
	for _, c := range eng.Calls() {
		if c.Op == dockertest.OpInspect {
			inspected = append(inspected, c.ID)
		}
	}
	firstCtr := slices.IndexFunc(inspected, func(id string) bool { return id == app || id == side })
	for _, sb := range []string{sbWeb, sbDone} {
		if i := slices.Index(inspected, sb); i < 0 || i > firstCtr {
			t.Errorf("inspects %v: sandbox %s not read before the containers", inspected, sb[:8])
		}
	}

	sb, err := s.Sandbox(sbWeb)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != runtime.PodSandboxState_SANDBOX_READY || sb.Config.GetMetadata().GetName() != "web" || sb.Project != sandbox.ProjectName(web.GetMetadata()) {
		t.Errorf("sandbox web: %+v %+v", sb.SandboxMetadata, sb.SandboxStatus)
	}
	if sb, _ := s.Sandbox(sbDone); sb.State != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("a sandbox whose infra container never ran: %v, want NOTREADY", sb.State)
	}
	c, err := s.Container(app)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != runtime.ContainerState_CONTAINER_RUNNING || c.SandboxID != sbWeb || c.Config.GetMetadata().GetName() != "app" ||
		c.LogPath != filepath.Join(web.GetLogDirectory(), "app/0.log") || c.Image != "busybox:latest" || c.Pid != 200 {
		t.Errorf("container app: %+v %+v", c.ContainerMetadata, c.ContainerStatus)
	}
	if c, _ := s.Container(side); c.State != runtime.ContainerState_CONTAINER_CREATED {
		t.Errorf("a container never started: %v, want CREATED", c.State)
	}
	if !slices.Contains(changes, "add "+app) || !slices.Contains(changes, "add "+side) {
		t.Errorf("listeners heard %v, want the adds of app and side", changes)
	}
}

// TestResyncPartial: an engine that fails part way loses no pod. A list
// that fails reads nothing and says so (the runtime stays unready); an
// inspect that fails keeps what the store held of that container, reads
// the others, and returns the error with the engine's kind.
func TestResyncPartial(t *testing.T) {
	ctx := context.Background()
	eng := dockertest.New()
	p := newPods(t, eng, t.TempDir())
	web := p.config("web")
	sb := p.sandbox(web, true)
	app := p.container(sb, web, "app", true)
	s := p.filledStore(ctx)
	side := p.container(sb, web, "side", true)

	eng.Fail(dockertest.OpList, "", dockertest.ErrUnavailable)
	if readAll, err := s.Resync(ctx); readAll || !dockerapi.IsUnavailable(err) {
		t.Errorf("Resync with the list failing = %v, %v; want not all read, Unavailable", readAll, err)
	}
	eng.Fail(dockertest.OpList, "", nil)

	eng.Exit(app, 3, false)
	eng.Fail(dockertest.OpInspect, app, dockertest.ErrUnavailable)
	readAll, err := s.Resync(ctx)
	if !readAll || !dockerapi.IsUnavailable(err) {
		t.Errorf("Resync with one inspect failing = %v, %v; want all listed, and its Unavailable error", readAll, err)
	}
	if c, err := s.Container(app); err != nil || c.State != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the container whose inspect failed: %v, %v; want kept as it was (RUNNING)", c.State, err)
	}
	if _, err := s.Container(side); err != nil {
		t.Errorf("the other container was not read: %v", err)
	}
	eng.Fail(dockertest.OpInspect, app, nil)
	if err := s.Refresh(ctx, app); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Container(app); c.State != runtime.ContainerState_CONTAINER_EXITED || c.ExitCode != 3 {
		t.Errorf("after the engine answers again: %v exit %d, want EXITED 3", c.State, c.ExitCode)
	}
}

// TestRefreshOOM: an "oom" event that came before the exit makes the exit
// OOMKilled even when the engine's own flag missed it, and only for
// containers the store holds.
func TestRefreshOOM(t *testing.T) {
	ctx := context.Background()
	eng := dockertest.New()
	p := newPods(t, eng, t.TempDir())
	web := p.config("web")
	sb := p.sandbox(web, true)
	a, b := p.container(sb, web, "a", true), p.container(sb, web, "b", true)
	s := p.filledStore(ctx)
	s.NoteOOM(a)
	s.NoteOOM("unknown")
	if s.OOMEvents("unknown") != 0 {
		t.Error("an oom of a container not held was counted")
	}
	eng.Exit(a, 137, false)
	eng.Exit(b, 137, false)
	for _, id := range []string{a, b} {
		if err := s.Refresh(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if c, _ := s.Container(a); c.State != runtime.ContainerState_CONTAINER_EXITED || c.Reason != "OOMKilled" {
		t.Errorf("after an oom event: %v reason %q, want EXITED OOMKilled", c.State, c.Reason)
	}
	if c, _ := s.Container(b); c.Reason == "OOMKilled" {
		t.Errorf("exit 137 without an oom: reason %q", c.Reason)
	}
	// Removed on the engine: the next refresh drops it.
	eng.Remove(b)
	if err := s.Refresh(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Container(b); err == nil {
		t.Error("a container removed on the engine is still held")
	}
}
