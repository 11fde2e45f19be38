package cri_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/suite"
)

// TestIdempotentStopRemove: CRI says stopping or removing what does not
// exist succeeds.
func TestIdempotentStopRemove(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	unknown := strings.Repeat("0", 32) + randHex(16)
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: unknown}); err != nil {
		t.Errorf("StopPodSandbox of an unknown id: %v", err)
	}
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: unknown}); err != nil {
		t.Errorf("RemovePodSandbox of an unknown id: %v", err)
	}
	if _, err := e.rt().StopContainer(e.ctx(), &runtime.StopContainerRequest{ContainerId: unknown, Timeout: 1}); err != nil {
		t.Errorf("StopContainer of an unknown id: %v", err)
	}
	if _, err := e.rt().RemoveContainer(e.ctx(), &runtime.RemoveContainerRequest{ContainerId: unknown}); err != nil {
		t.Errorf("RemoveContainer of an unknown id: %v", err)
	}
	_, err := e.rt().PodSandboxStatus(e.ctx(), &runtime.PodSandboxStatusRequest{PodSandboxId: unknown})
	wantCode(t, err, codes.NotFound, unknown)
	_, err = e.rt().ContainerStatus(e.ctx(), &runtime.ContainerStatusRequest{ContainerId: unknown})
	wantCode(t, err, codes.NotFound, unknown)
	_, err = e.rt().StartContainer(e.ctx(), &runtime.StartContainerRequest{ContainerId: unknown})
	wantCode(t, err, codes.NotFound, unknown)
}

// TestAlreadyExists: the same pod or container attempt twice is refused
// with the id of the one that exists; the next attempt is a new object.
func TestAlreadyExists(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("twice")
	id := e.runPod(pod)
	_, err := e.rt().RunPodSandbox(e.ctx(), &runtime.RunPodSandboxRequest{Config: pod})
	wantCode(t, err, codes.AlreadyExists, id)
	if st := e.podStatus(id); st.GetState() != runtime.PodSandboxState_SANDBOX_READY {
		t.Errorf("the existing pod is %s after the refused duplicate", st.GetState())
	}

	ctr := ctrConfig("dup", "sleep 100")
	cid := e.createCtr(id, pod, ctr)
	_, err = e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{PodSandboxId: id, Config: ctr, SandboxConfig: pod})
	wantCode(t, err, codes.AlreadyExists, cid)
	if list := e.engineCtrs(sandbox.LabelSandboxID + "=" + id); len(list) != 1 {
		t.Errorf("engine holds %d containers of the pod after a refused duplicate, want 1", len(list))
	}
	ctr1 := proto.Clone(ctr).(*runtime.ContainerConfig)
	ctr1.Metadata.Attempt = 1
	ctr1.LogPath = "dup-1.log"
	cid1 := e.createCtr(id, pod, ctr1)
	if cid1 == cid {
		t.Fatalf("attempt 1 got the id of attempt 0")
	}
	if st := e.ctrStatus(cid1); st.GetMetadata().GetAttempt() != 1 || st.GetMetadata().GetName() != "dup" {
		t.Errorf("attempt 1 metadata %v", st.GetMetadata())
	}

	pod1 := proto.Clone(pod).(*runtime.PodSandboxConfig)
	pod1.Metadata.Attempt = 1
	id1 := e.runPod(pod1)
	if id1 == id {
		t.Fatalf("pod attempt 1 got the id of attempt 0")
	}
	if st := e.podStatus(id1); st.GetState() != runtime.PodSandboxState_SANDBOX_READY || st.GetMetadata().GetAttempt() != 1 {
		t.Errorf("pod attempt 1: %s %v", st.GetState(), st.GetMetadata())
	}
	if sandbox.ProjectName(pod1.GetMetadata()) == sandbox.ProjectName(pod.GetMetadata()) {
		t.Errorf("both attempts share project %s", sandbox.ProjectName(pod.GetMetadata()))
	}
}

// TestBadPodRequests: invalid RunPodSandbox requests are InvalidArgument and
// leave nothing on the engine or in the state dir.
func TestBadPodRequests(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	for _, tc := range []struct {
		name   string
		mutate func(*runtime.PodSandboxConfig)
		nilCfg bool
		sub    string
	}{
		{name: "no config", nilCfg: true, sub: "config"},
		{name: "no metadata", mutate: func(c *runtime.PodSandboxConfig) { c.Metadata = nil }, sub: "metadata"},
		{name: "empty name", mutate: func(c *runtime.PodSandboxConfig) { c.Metadata.Name = "" }, sub: "name"},
		{name: "empty namespace", mutate: func(c *runtime.PodSandboxConfig) { c.Metadata.Namespace = "" }, sub: "namespace"},
		{name: "empty uid", mutate: func(c *runtime.PodSandboxConfig) { c.Metadata.Uid = "" }, sub: "uid"},
		{name: "relative log dir", mutate: func(c *runtime.PodSandboxConfig) { c.LogDirectory = "var/log/pods" }, sub: "log_directory"},
		{name: "bad dns server", mutate: func(c *runtime.PodSandboxConfig) { c.DnsConfig = &runtime.DNSConfig{Servers: []string{"not-an-ip"}} }, sub: "not-an-ip"},
		{name: "bad port", mutate: func(c *runtime.PodSandboxConfig) {
			c.PortMappings = []*runtime.PortMapping{{ContainerPort: 70000}}
		}, sub: "70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := e.podConfig("bad")
			uid, project := cfg.GetMetadata().GetUid(), sandbox.ProjectName(cfg.GetMetadata())
			e.cleanupPod(cfg)
			req := &runtime.RunPodSandboxRequest{Config: cfg}
			if tc.nilCfg {
				req.Config = nil
			} else {
				tc.mutate(cfg)
			}
			_, err := e.rt().RunPodSandbox(e.ctx(), req)
			wantCode(t, err, codes.InvalidArgument, tc.sub)
			if list := e.engineCtrs(sandbox.LabelProject + "=" + project); len(list) != 0 {
				t.Errorf("engine holds %d containers of project %s", len(list), project)
			}
			if list := e.engineCtrs(sandbox.LabelPodUID + "=" + uid); len(list) != 0 {
				t.Errorf("engine holds %d containers of pod uid %s", len(list), uid)
			}
			if _, err := os.Stat(e.projectDir(sandbox.ProjectName(cfg.GetMetadata()))); !os.IsNotExist(err) {
				t.Errorf("a project folder was made (%v)", err)
			}
		})
	}
	// A runtime handler the engine does not have.
	cfg := e.podConfig("handler")
	e.cleanupPod(cfg)
	_, err := e.rt().RunPodSandbox(e.ctx(), &runtime.RunPodSandboxRequest{Config: cfg, RuntimeHandler: "kata"})
	wantCode(t, err, codes.InvalidArgument, "kata")
	if list := e.engineCtrs(sandbox.LabelPodUID + "=" + cfg.GetMetadata().GetUid()); len(list) != 0 {
		t.Errorf("engine holds %d containers of the refused pod", len(list))
	}
}

// TestBadContainerRequests: invalid CreateContainer requests get the right
// code and leave the pod as it was.
func TestBadContainerRequests(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("badctr")
	podID := e.runPod(pod)
	project := sandbox.ProjectName(pod.GetMetadata())
	missing := fmt.Sprintf("localhost/cri-compose/no-such-image-%s:v1", randHex(4))
	res := func(r *runtime.LinuxContainerResources) func(*runtime.ContainerConfig) {
		return func(c *runtime.ContainerConfig) { c.Linux = &runtime.LinuxContainerConfig{Resources: r} }
	}
	for _, tc := range []struct {
		name   string
		mutate func(*runtime.ContainerConfig)
		code   codes.Code
		sub    string
	}{
		{"no metadata", func(c *runtime.ContainerConfig) { c.Metadata = nil }, codes.InvalidArgument, "metadata"},
		{"empty name", func(c *runtime.ContainerConfig) { c.Metadata.Name = "" }, codes.InvalidArgument, "name"},
		{"no image", func(c *runtime.ContainerConfig) { c.Image = nil }, codes.InvalidArgument, "image"},
		{"empty image", func(c *runtime.ContainerConfig) { c.Image.Image = "" }, codes.InvalidArgument, "image"},
		{"missing image", func(c *runtime.ContainerConfig) { c.Image.Image = missing }, codes.NotFound, missing},
		{"memory 1 byte", res(&runtime.LinuxContainerResources{MemoryLimitInBytes: 1}), codes.InvalidArgument, "memory"},
		{"negative cpu quota", res(&runtime.LinuxContainerResources{CpuQuota: -5}), codes.InvalidArgument, "cpu_quota"},
		{"huge cpu shares", res(&runtime.LinuxContainerResources{CpuShares: 1_000_000_000}), codes.InvalidArgument, "cpu_shares"},
		{"oom score adj 5000", res(&runtime.LinuxContainerResources{OomScoreAdj: 5000}), codes.InvalidArgument, "oom_score_adj"},
		{"log path escapes", func(c *runtime.ContainerConfig) { c.LogPath = "../../etc/x" }, codes.InvalidArgument, "log_path"},
		{"absolute log path", func(c *runtime.ContainerConfig) { c.LogPath = "/etc/x" }, codes.InvalidArgument, "log_path"},
		{"relative mount target", func(c *runtime.ContainerConfig) {
			c.Mounts = []*runtime.Mount{{HostPath: t.TempDir(), ContainerPath: "data"}}
		}, codes.InvalidArgument, "container_path"},
		{"env without name", func(c *runtime.ContainerConfig) {
			c.Envs = []*runtime.KeyValue{{Key: "", Value: []byte("x")}}
		}, codes.InvalidArgument, "environment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ctrConfig("bad", "true")
			tc.mutate(cfg)
			_, err := e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: pod})
			wantCode(t, err, tc.code, tc.sub)
			if list := e.engineCtrs(sandbox.LabelSandboxID + "=" + podID); len(list) != 0 {
				t.Errorf("engine holds %d containers of the pod", len(list))
			}
			if list := e.engineCtrs(sandbox.LabelProject + "=" + project); len(list) != 1 {
				t.Errorf("engine holds %d containers of project %s, want 1 (infra)", len(list), project)
			}
			if got := e.listCtrs(&runtime.ContainerFilter{PodSandboxId: podID}); len(got) != 0 {
				t.Errorf("the pod lists %d containers", len(got))
			}
		})
	}
	p := loadComposeFile(t, project, filepath.Join(e.projectDir(project), "compose.yaml"))
	if got := serviceNames(p); !slices.Equal(got, []string{"pod"}) {
		t.Errorf("services after refused requests: %v", got)
	}

	// Unknown pod.
	unknown := strings.Repeat("f", 64)
	_, err := e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{PodSandboxId: unknown, Config: ctrConfig("x", "true"), SandboxConfig: pod})
	wantCode(t, err, codes.NotFound, unknown)
	if list := e.engineCtrs(sandbox.LabelSandboxID + "=" + unknown); len(list) != 0 {
		t.Errorf("engine holds %d containers of the unknown pod", len(list))
	}

	// Start twice.
	cid := e.runCtr(podID, pod, ctrConfig("once", "sleep 100"))
	_, err = e.rt().StartContainer(e.ctx(), &runtime.StartContainerRequest{ContainerId: cid})
	wantCode(t, err, codes.FailedPrecondition, cid)
	if st := e.ctrStatus(cid); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after the refused second start the container is %s", st.GetState())
	}

	// A stopped pod takes no new containers.
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	_, err = e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("late", "true"), SandboxConfig: pod})
	wantCode(t, err, codes.FailedPrecondition, podID)
	if list := e.engineCtrs(sandbox.LabelSandboxID + "=" + podID); len(list) != 1 {
		t.Errorf("engine holds %d containers of the stopped pod, want 1", len(list))
	}

	// Nor does a removed one.
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	_, err = e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{PodSandboxId: podID, Config: ctrConfig("later", "true"), SandboxConfig: pod})
	wantCode(t, err, codes.NotFound, podID)
	if list := e.engineCtrs(sandbox.LabelProject + "=" + project); len(list) != 0 {
		t.Errorf("engine holds %d containers of the removed pod", len(list))
	}
	if _, err := os.Stat(e.projectDir(project)); !os.IsNotExist(err) {
		t.Errorf("the removed pod's project folder is back (%v)", err)
	}
}

// TestListenSocket: Listen refuses a socket another server answers on, and
// replaces a stale one.
func TestListenSocket(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	_, err := cri.Listen("unix://"+e.server().Socket, "")
	if err == nil || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("Listen on a served socket: %v, want an error naming another process", err)
	}
	// The served socket still works.
	if _, err := e.rt().Version(e.ctx(), &runtime.VersionRequest{}); err != nil {
		t.Fatalf("Version after the refused Listen: %v", err)
	}

	stale := filepath.Join(suite.SocketDir(t), "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("the stale socket file should remain: %v", err)
	}
	l2, err := cri.Listen(stale, "")
	if err != nil {
		t.Fatalf("Listen on a stale socket: %v", err)
	}
	defer l2.Close()
	go func() {
		c, err := l2.Accept()
		if err == nil {
			c.Close()
		}
	}()
	c, err := net.DialTimeout("unix", stale, 5*time.Second)
	if err != nil {
		t.Fatalf("dial the new socket: %v", err)
	}
	c.Close()
	fi, err := os.Stat(stale)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket mode %v, want a socket with 0660", fi.Mode())
	}
}
