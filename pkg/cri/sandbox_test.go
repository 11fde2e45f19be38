package cri_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// TestPodLifecycle runs a pod through Run, Status, Stop and Remove and checks
// what the engine and the state dir hold at each step.
func TestPodLifecycle(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	cfg := e.podConfig("life")
	project := sandbox.ProjectName(cfg.GetMetadata())
	id := e.runPod(cfg)

	st := e.podStatus(id)
	if st.GetId() != id || st.GetState() != runtime.PodSandboxState_SANDBOX_READY {
		t.Fatalf("status %s %s, want %s READY", st.GetId(), st.GetState(), id)
	}
	if !proto.Equal(st.GetMetadata(), cfg.GetMetadata()) {
		t.Errorf("metadata %v, want %v", st.GetMetadata(), cfg.GetMetadata())
	}
	if st.GetCreatedAt() == 0 || time.Since(time.Unix(0, st.GetCreatedAt())) > time.Minute {
		t.Errorf("created_at %d is not recent", st.GetCreatedAt())
	}
	if st.GetLabels()["test"] != "life" || st.GetAnnotations()["cri-compose.test/annotation"] == "" {
		t.Errorf("labels %v annotations %v lost", st.GetLabels(), st.GetAnnotations())
	}
	ip, err := netip.ParseAddr(st.GetNetwork().GetIp())
	if err != nil {
		t.Fatalf("pod IP %q: %v", st.GetNetwork().GetIp(), err)
	}
	in, err := e.d.ContainerInspect(e.ctx(), id)
	if err != nil {
		t.Fatal(err)
	}
	ep := in.NetworkSettings.Networks[testNetwork]
	if ep == nil {
		t.Fatalf("infra container is not on %s: %v", testNetwork, in.NetworkSettings.Networks)
	}
	if ep.IPAddress != ip {
		t.Errorf("pod IP %s, engine says %s on %s", ip, ep.IPAddress, testNetwork)
	}
	if in.Config.Labels[sandbox.LabelProject] != project || in.Config.Labels[sandbox.LabelService] != sandbox.InfraService {
		t.Errorf("infra labels %v", in.Config.Labels)
	}

	// A container, so Stop and Remove have something to act on.
	cid := e.runCtr(id, cfg, ctrConfig("sleeper", "sleep 100"))
	e.waitCtrState(cid, runtime.ContainerState_CONTAINER_RUNNING, 10*time.Second)

	start := time.Now()
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	t.Logf("StopPodSandbox took %v", time.Since(start))
	if st := e.podStatus(id); st.GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("after stop the pod is %s, want NOTREADY", st.GetState())
	}
	if cs := e.ctrStatus(cid); cs.GetState() != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("after stopping the pod its container is %s, want EXITED", cs.GetState())
	}
	// Stop is idempotent.
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("second StopPodSandbox: %v", err)
	}
	if n := len(e.engineCtrs(sandbox.LabelProject + "=" + project)); n != 2 {
		t.Errorf("engine holds %d containers of the stopped pod, want 2 (infra and container)", n)
	}

	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if list := e.engineCtrs(sandbox.LabelProject + "=" + project); len(list) != 0 {
		t.Errorf("engine still holds %d containers of project %s", len(list), project)
	}
	if list := e.engineCtrs(sandbox.LabelSandboxID + "=" + id); len(list) != 0 {
		t.Errorf("engine still holds %d containers of sandbox %s", len(list), id)
	}
	if _, err := os.Stat(e.projectDir(project)); !os.IsNotExist(err) {
		t.Errorf("project folder %s is still there (%v)", e.projectDir(project), err)
	}
	if got := e.listPods(&runtime.PodSandboxFilter{Id: id}); len(got) != 0 {
		t.Errorf("removed pod is still listed: %v", got)
	}
	if got := e.listCtrs(&runtime.ContainerFilter{PodSandboxId: id}); len(got) != 0 {
		t.Errorf("containers of the removed pod are still listed: %v", got)
	}
	_, err = e.rt().PodSandboxStatus(e.ctx(), &runtime.PodSandboxStatusRequest{PodSandboxId: id})
	wantCode(t, err, codes.NotFound)
	// Remove is idempotent.
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("second RemovePodSandbox: %v", err)
	}
}

// TestListPodSandboxFilters checks the id prefix, state and label selector
// filters on pods of this test only.
func TestListPodSandboxFilters(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	a, b := e.podConfig("lista"), e.podConfig("listb")
	b.Labels["run"] = a.Labels["run"] // both answer to one selector
	b.Labels["which"] = "b"
	aID, bID := e.runPod(a), e.runPod(b)
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: bID}); err != nil {
		t.Fatal(err)
	}
	ids := func(items []*runtime.PodSandbox) []string {
		var out []string
		for _, p := range items {
			out = append(out, p.GetId())
		}
		slices.Sort(out)
		return out
	}
	both := []string{aID, bID}
	slices.Sort(both)
	run := map[string]string{"run": a.Labels["run"]}

	if got := ids(e.listPods(&runtime.PodSandboxFilter{LabelSelector: run})); !slices.Equal(got, both) {
		t.Errorf("label selector %v: %v, want %v", run, got, both)
	}
	if got := ids(e.listPods(&runtime.PodSandboxFilter{Id: aID[:12]})); !slices.Equal(got, []string{aID}) {
		t.Errorf("id prefix %s: %v", aID[:12], got)
	}
	ready := &runtime.PodSandboxStateValue{State: runtime.PodSandboxState_SANDBOX_READY}
	notReady := &runtime.PodSandboxStateValue{State: runtime.PodSandboxState_SANDBOX_NOTREADY}
	if got := ids(e.listPods(&runtime.PodSandboxFilter{LabelSelector: run, State: ready})); !slices.Equal(got, []string{aID}) {
		t.Errorf("READY: %v, want [%s]", got, aID)
	}
	if got := ids(e.listPods(&runtime.PodSandboxFilter{LabelSelector: run, State: notReady})); !slices.Equal(got, []string{bID}) {
		t.Errorf("NOTREADY: %v, want [%s]", got, bID)
	}
	if got := ids(e.listPods(&runtime.PodSandboxFilter{LabelSelector: map[string]string{"run": a.Labels["run"], "which": "b"}})); !slices.Equal(got, []string{bID}) {
		t.Errorf("two-label selector: %v, want [%s]", got, bID)
	}
	if got := e.listPods(&runtime.PodSandboxFilter{LabelSelector: map[string]string{"run": "no-such-run"}}); len(got) != 0 {
		t.Errorf("unmatched selector lists %d pods", len(got))
	}
	// Unfiltered, both are there, with their metadata.
	var seen int
	for _, p := range e.listPods(nil) {
		switch p.GetId() {
		case aID:
			seen++
			if p.GetMetadata().GetUid() != a.GetMetadata().GetUid() || p.GetState() != runtime.PodSandboxState_SANDBOX_READY {
				t.Errorf("pod a listed as %v", p)
			}
		case bID:
			seen++
			if p.GetMetadata().GetUid() != b.GetMetadata().GetUid() || p.GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY {
				t.Errorf("pod b listed as %v", p)
			}
		}
	}
	if seen != 2 {
		t.Errorf("unfiltered list shows %d of the 2 pods", seen)
	}
}

// TestComposeProject checks that each pod is a real Compose project: the
// file compose-go loads, and the labels Compose (v1 and v2) needs.
func TestComposeProject(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	cfg := e.podConfig("compose")
	project := sandbox.ProjectName(cfg.GetMetadata())
	id := e.runPod(cfg)
	keep := e.createCtr(id, cfg, ctrConfig("web", "sleep 100"))
	gone := e.createCtr(id, cfg, ctrConfig("sidecar", "sleep 100"))

	file := filepath.Join(e.projectDir(project), "compose.yaml")
	p := loadComposeFile(t, project, file)
	if got := serviceNames(p); !slices.Equal(got, []string{"pod", "sidecar", "web"}) {
		t.Errorf("services %v, want [pod sidecar web]", got)
	}
	if s := p.Services["web"]; s.Image != testImage || s.NetworkMode != "service:pod" {
		t.Errorf("service web: image %q network_mode %q", s.Image, s.NetworkMode)
	}
	if _, ok := p.Services["pod"].Networks[testNetwork]; !ok {
		t.Errorf("service pod is not on %s: %v", testNetwork, p.Services["pod"].Networks)
	}

	want := map[string]string{
		sandbox.LabelProject:     project,
		sandbox.LabelOneoff:      "False",
		sandbox.LabelNumber:      "1",
		sandbox.LabelWorkingDir:  e.projectDir(project),
		sandbox.LabelConfigFiles: file,
	}
	services := map[string]string{id: "pod", keep: "web", gone: "sidecar"}
	for cid, service := range services {
		in, err := e.d.ContainerInspect(e.ctx(), cid)
		if err != nil {
			t.Fatal(err)
		}
		l := in.Config.Labels
		for k, v := range want {
			if l[k] != v {
				t.Errorf("%s: label %s=%q, want %q", service, k, l[k], v)
			}
		}
		if l[sandbox.LabelService] != service {
			t.Errorf("%s: label %s=%q", service, sandbox.LabelService, l[sandbox.LabelService])
		}
		if len(l[sandbox.LabelConfigHash]) != 64 {
			t.Errorf("%s: config-hash %q", service, l[sandbox.LabelConfigHash])
		}
		if want := project + "-" + service + "-1-0"; strings.TrimPrefix(in.Name, "/") != want {
			t.Errorf("engine name %s, want %s", in.Name, want)
		}
	}
	if list := e.engineCtrs(sandbox.LabelProject+"="+project, sandbox.LabelOneoff+"=False"); len(list) != 3 {
		t.Errorf("engine lists %d containers of project %s, want 3", len(list), project)
	}

	if _, err := e.rt().RemoveContainer(e.ctx(), &runtime.RemoveContainerRequest{ContainerId: gone}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	p = loadComposeFile(t, project, file)
	if got := serviceNames(p); !slices.Equal(got, []string{"pod", "web"}) {
		t.Errorf("after RemoveContainer the services are %v, want [pod web]", got)
	}
	if list := e.engineCtrs(sandbox.LabelProject + "=" + project); len(list) != 2 {
		t.Errorf("after RemoveContainer the engine holds %d containers of the project, want 2", len(list))
	}
}

func loadComposeFile(t *testing.T, project, file string) *types.Project {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("compose file: %v", err)
	}
	details := types.ConfigDetails{
		WorkingDir:  filepath.Dir(file),
		ConfigFiles: []types.ConfigFile{{Filename: file, Content: b}},
		Environment: types.Mapping{},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := loader.LoadWithContext(ctx, details, func(o *loader.Options) {
		o.SetProjectName(project, true)
		o.ResolvePaths = false
	})
	if err != nil {
		t.Fatalf("compose-go cannot load %s: %v\n%s", file, err, b)
	}
	return p
}

func serviceNames(p *types.Project) []string {
	var out []string
	for name := range p.Services {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
