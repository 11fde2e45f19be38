package fault

// kube is what the fault tests do in kubelet's place: CRI calls on one
// daemon, and checks that the engine, the runtime's lists and the state
// dir agree with what kubelet believes exists.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// image is the busybox image the containers run.
const image = "localhost/cri-compose/test-busybox:fault"

var imageOnce sync.Map // engine host → error of loading busybox into it

// needImage loads busybox into eng once per test process.
func needImage(t *testing.T, eng *suite.Engine) {
	t.Helper()
	v, _ := imageOnce.LoadOrStore(eng.Host(), &sync.Once{})
	v.(*sync.Once).Do(func() { images.NeedBusybox(t, eng.Client, image) })
}

type kube struct {
	t   *testing.T
	d   *suite.Daemon
	eng *suite.Engine
	ns  string
	ctx context.Context

	pods map[string]*runtime.PodSandboxConfig // by sandbox id, every pod run
}

var nsSeq struct {
	sync.Mutex
	n int
}

// newKube prepares a daemon (not started) on the engine at host and a pod
// namespace of its own; everything they leave in the engine is removed
// when t ends, after the daemon has stopped.
func newKube(t *testing.T, host string, cfg suite.DaemonConfig) *kube {
	t.Helper()
	eng := suite.NewEngine(t, host)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	if _, err := eng.Ping(ctx); err != nil {
		cancel()
		images.SkipOrFail(t, "no Docker engine answers at %s: %v", eng.Host(), err)
	}
	needImage(t, eng)
	nsSeq.Lock()
	nsSeq.n++
	ns := fmt.Sprintf("fault-%s-%d", suite.RunID(), nsSeq.n)
	nsSeq.Unlock()
	k := &kube{t: t, eng: eng, ns: ns, ctx: ctx, pods: map[string]*runtime.PodSandboxConfig{}}
	var network string
	t.Cleanup(func() { // registered first: runs after the daemon stopped
		defer cancel()
		if left := eng.Sweep(ns, network); len(left) > 0 {
			t.Logf("cleanup removed containers the test left: %v", left)
		}
	})
	k.d = suite.NewDaemon(t, cfg)
	network = k.d.Cfg.Network
	return k
}

// podConfig is pod name's config at attempt, with a DNS config (so its
// project folder also holds a resolv.conf the containers mount).
func (k *kube) podConfig(name string, attempt uint32) *runtime.PodSandboxConfig {
	logDir := filepath.Join(k.d.LogDir, k.ns+"_"+name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		k.t.Fatal(err)
	}
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: k.ns, Uid: "uid-" + k.ns + "-" + name, Attempt: attempt},
		Hostname:     name,
		LogDirectory: logDir,
		DnsConfig:    &runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"svc.cluster.local"}, Options: []string{"ndots:5"}},
		Labels:       map[string]string{"app": name},
	}
}

func ctrConfig(name string, attempt uint32) *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata: &runtime.ContainerMetadata{Name: name, Attempt: attempt},
		Image:    &runtime.ImageSpec{Image: image},
		Command:  []string{"sh", "-c", "echo started " + name + "; exec sleep 3600"},
		LogPath:  fmt.Sprintf("%s/%d.log", name, attempt),
	}
}

func (k *kube) run(pod *runtime.PodSandboxConfig) string {
	k.t.Helper()
	r, err := k.d.RT.RunPodSandbox(k.ctx, &runtime.RunPodSandboxRequest{Config: pod})
	if err != nil {
		k.t.Fatalf("RunPodSandbox %s: %v", pod.GetMetadata(), err)
	}
	k.pods[r.GetPodSandboxId()] = pod
	return r.GetPodSandboxId()
}

func (k *kube) create(podID string, ctr *runtime.ContainerConfig) string {
	k.t.Helper()
	r, err := k.d.RT.CreateContainer(k.ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctr, SandboxConfig: k.pods[podID]})
	if err != nil {
		k.t.Fatalf("CreateContainer %s: %v", ctr.GetMetadata(), err)
	}
	return r.GetContainerId()
}

func (k *kube) start(id string) {
	k.t.Helper()
	if _, err := k.d.RT.StartContainer(k.ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		k.t.Fatalf("StartContainer %s: %v", id, err)
	}
}

// runWith runs a pod with one started container per name.
func (k *kube) runWith(pod *runtime.PodSandboxConfig, names ...string) (string, []string) {
	k.t.Helper()
	id := k.run(pod)
	var ctrs []string
	for _, n := range names {
		c := k.create(id, ctrConfig(n, 0))
		k.start(c)
		ctrs = append(ctrs, c)
	}
	return id, ctrs
}

func (k *kube) stopPod(id string) {
	k.t.Helper()
	if _, err := k.d.RT.StopPodSandbox(k.ctx, &runtime.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		k.t.Fatalf("StopPodSandbox %s: %v", id, err)
	}
}

func (k *kube) removePod(id string) {
	k.t.Helper()
	if _, err := k.d.RT.RemovePodSandbox(k.ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		k.t.Fatalf("RemovePodSandbox %s: %v", id, err)
	}
}

func (k *kube) removeContainer(id string) {
	k.t.Helper()
	if _, err := k.d.RT.RemoveContainer(k.ctx, &runtime.RemoveContainerRequest{ContainerId: id}); err != nil {
		k.t.Fatalf("RemoveContainer %s: %v", id, err)
	}
}

func (k *kube) listPods() []*runtime.PodSandbox {
	k.t.Helper()
	r, err := k.d.RT.ListPodSandbox(k.ctx, &runtime.ListPodSandboxRequest{})
	if err != nil {
		k.t.Fatalf("ListPodSandbox: %v", err)
	}
	return r.GetItems()
}

func (k *kube) listContainers() []*runtime.Container {
	k.t.Helper()
	r, err := k.d.RT.ListContainers(k.ctx, &runtime.ListContainersRequest{})
	if err != nil {
		k.t.Fatalf("ListContainers: %v", err)
	}
	return r.GetContainers()
}

// consistent checks that the runtime lists every container the engine
// holds for the namespace and nothing else: none is invisible to kubelet
// (which could then never remove it), none is reported that is gone.
func (k *kube) consistent(when string) {
	k.t.Helper()
	for _, d := range k.disagreements() {
		k.t.Errorf("%s: %s", when, d)
	}
}

// consistentWithin is consistent once the runtime has had up to timeout to
// follow the engine's events: what the engine did last (a request that
// landed after its caller gave up) reaches the runtime as an event.
func (k *kube) consistentWithin(when string, timeout time.Duration) {
	k.t.Helper()
	// A timeout is not the failure: consistent reports each disagreement.
	_ = suite.Poll("the runtime to agree with the engine", timeout, func() (bool, string) {
		d := k.disagreements()
		return len(d) == 0, strings.Join(d, "; ")
	})
	k.consistent(when)
}

func (k *kube) disagreements() []string {
	k.t.Helper()
	eng, err := k.eng.Containers(k.ctx, k.ns)
	if err != nil {
		k.t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, p := range k.listPods() {
		listed[p.GetId()] = true
	}
	for _, c := range k.listContainers() {
		listed[c.GetId()] = true
	}
	var out []string
	for id, name := range eng {
		if !listed[id] {
			out = append(out, fmt.Sprintf("the engine holds %s (%s), which the runtime does not list", name, id[:12]))
		}
	}
	for id := range listed {
		if _, ok := eng[id]; !ok {
			out = append(out, fmt.Sprintf("the runtime lists %s, which the engine does not hold", id[:12]))
		}
	}
	return out
}

// expect checks that the engine holds exactly the pods (by sandbox id) and
// their containers in want, the runtime lists exactly them, the state dir
// holds exactly their project folders, each compose file names exactly the
// pod's services, and the pod network exists once.
func (k *kube) expect(when string, want map[string][]string) {
	k.t.Helper()
	wantIDs := map[string]bool{}
	wantProjects := []string{}
	for pod, ctrs := range want {
		wantIDs[pod] = true
		for _, c := range ctrs {
			wantIDs[c] = true
		}
		wantProjects = append(wantProjects, sandbox.ProjectName(k.pods[pod].GetMetadata()))
	}
	eng, err := k.eng.Containers(k.ctx, k.ns)
	if err != nil {
		k.t.Fatal(err)
	}
	for id, name := range eng {
		if !wantIDs[id] {
			k.t.Errorf("%s: leaked: the engine still holds %s (%s)", when, name, id[:12])
		}
	}
	for id := range wantIDs {
		if _, ok := eng[id]; !ok {
			k.t.Errorf("%s: lost: the engine no longer holds %s", when, id[:12])
		}
	}
	k.consistent(when)
	for _, c := range k.listContainers() {
		if pod := c.GetPodSandboxId(); !slices.Contains(want[pod], c.GetId()) {
			k.t.Errorf("%s: container %s is listed in pod %s", when, c.GetId()[:12], pod[:min(12, len(pod))])
		}
	}
	sort.Strings(wantProjects)
	if got := k.d.ProjectFolders(); !slices.Equal(got, wantProjects) {
		k.t.Errorf("%s: project folders %v, want %v", when, got, wantProjects)
	}
	for pod, ctrs := range want {
		wantSvcs := []string{sandbox.InfraService}
		for _, c := range ctrs {
			st, err := k.d.RT.ContainerStatus(k.ctx, &runtime.ContainerStatusRequest{ContainerId: c})
			if err != nil {
				k.t.Fatalf("%s: ContainerStatus %s: %v", when, c[:12], err)
			}
			wantSvcs = append(wantSvcs, sandbox.ServiceName(st.GetStatus().GetMetadata().GetName()))
		}
		slices.Sort(wantSvcs)
		wantSvcs = slices.Compact(wantSvcs)
		project := sandbox.ProjectName(k.pods[pod].GetMetadata())
		if got := composeServices(k.t, filepath.Join(k.d.StateDir, "projects", project, "compose.yaml")); !slices.Equal(got, wantSvcs) {
			k.t.Errorf("%s: compose file of %s names services %v, want %v", when, project, got, wantSvcs)
		}
	}
	if n, err := k.eng.Networks(k.ctx, k.d.Cfg.Network); err != nil || n != 1 {
		k.t.Errorf("%s: %d networks named %s (%v), want 1", when, n, k.d.Cfg.Network, err)
	}
}

// composeServices lists the services a compose file names (nil when there
// is no file).
func composeServices(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("compose file: %v", err)
		return nil
	}
	var f struct {
		Services map[string]any `json:"services"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Errorf("compose file %s: %v", path, err)
	}
	var out []string
	for s := range f.Services {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// teardown removes every pod the way kubelet does when they are deleted,
// and checks that nothing of them is left.
func (k *kube) teardown() {
	k.t.Helper()
	for _, p := range k.listPods() {
		k.stopPod(p.GetId())
		k.removePod(p.GetId())
	}
	k.expect("after teardown", nil)
}
