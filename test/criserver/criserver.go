// Package criserver runs a real cri.Server on the real engine behind a gRPC
// server on a unix socket, for tests that look at the server from outside
// (metrics, traces) the way kubelet and crictl call it: nothing is mocked.
package criserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
)

const (
	// Network is the pod network of the servers started here, shared by
	// all runs and left in place.
	Network = "cri-compose-test"
	// Image is the busybox image the containers run.
	Image = "localhost/cri-compose/test-busybox:cri-test"
)

// Options shape the server.
type Options struct {
	Docker []dockerapi.Option  // options of the engine client
	GRPC   []grpc.ServerOption // options of the gRPC server
}

// Env is one running server and its clients.
type Env struct {
	t        testing.TB
	Docker   *dockerapi.Client
	Server   *cri.Server
	RT       runtime.RuntimeServiceClient
	Images   runtime.ImageServiceClient
	StateDir string
}

// Start serves a new cri.Server on a fresh state dir until t ends, after
// loading the busybox image, and waits until it reports ready. With no
// engine or no busybox it skips t (fails it in CI).
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	d, err := dockerapi.New("", o.Docker...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	pctx, pcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer pcancel()
	if _, err := d.Ping(pctx); err != nil {
		images.SkipOrFail(t, "no Docker engine answers at %s: %v", d.Host(), err)
	}
	images.NeedBusybox(t, d, Image)

	e := &Env{t: t, Docker: d, StateDir: t.TempDir()}
	e.Server = cri.NewServer(cri.Config{StateDir: e.StateDir, Network: Network}, d)
	sock := filepath.Join(socketDir(t), "cri.sock")
	l, err := cri.Listen("unix://"+sock, "")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(o.GRPC...)
	e.Server.Register(gs)
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); e.Server.Run(ctx) }()
	go func() { _ = gs.Serve(l) }()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		gs.GracefulStop()
		select {
		case <-runDone:
		case <-time.After(30 * time.Second):
			t.Errorf("Server.Run did not return 30s after its context ended")
		}
	})
	e.RT, e.Images = runtime.NewRuntimeServiceClient(conn), runtime.NewImageServiceClient(conn)

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := e.RT.Status(ctx, &runtime.StatusRequest{})
		cancel()
		if err == nil && ready(resp) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("runtime not ready after 30s: %v %v", err, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ready(r *runtime.StatusResponse) bool {
	for _, c := range r.GetStatus().GetConditions() {
		if c.GetType() == runtime.RuntimeReady {
			return c.GetStatus()
		}
	}
	return false
}

func socketDir(t testing.TB) string {
	if dir := t.TempDir(); len(dir) < 90 {
		return dir
	}
	dir, err := os.MkdirTemp("", "cri-sock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// PodConfig is a pod with a unique name, logging to a fresh folder; the
// engine's containers of its project are removed when the test ends,
// whatever the test did.
func (e *Env) PodConfig(name string) *runtime.PodSandboxConfig {
	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	cfg := &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name + "-" + suffix, Namespace: "cri-test", Uid: "uid-" + suffix},
		Hostname:     name,
		LogDirectory: e.t.TempDir(),
	}
	project := sandbox.ProjectName(cfg.GetMetadata())
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, _ := e.Docker.ContainerList(ctx, sandbox.LabelProject+"="+project)
		for _, c := range list {
			_ = e.Docker.ContainerRemove(ctx, c.ID)
		}
	})
	return cfg
}

// Lifecycle runs one pod through what kubelet does: RunPodSandbox,
// CreateContainer (busybox printing output on stdout and stderr),
// StartContainer, waiting for it to exit, StopContainer, RemoveContainer,
// StopPodSandbox and RemovePodSandbox. whileUp (if not nil) runs once the
// container has exited, with the pod still running. It fails t on any
// error.
func (e *Env) Lifecycle(ctx context.Context, name string, whileUp func()) {
	t := e.t
	t.Helper()
	pod := e.PodConfig(name)
	run, err := e.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: pod})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	podID := run.GetPodSandboxId()
	cr, err := e.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{
		PodSandboxId: podID, SandboxConfig: pod,
		Config: &runtime.ContainerConfig{
			Metadata: &runtime.ContainerMetadata{Name: "hello"},
			Image:    &runtime.ImageSpec{Image: Image},
			Command:  []string{"sh", "-c", "echo hello from cri-compose; echo to stderr >&2"},
			LogPath:  "hello.log",
		},
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	id := cr.GetContainerId()
	if _, err := e.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := e.RT.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		if st.GetStatus().GetState() == runtime.ContainerState_CONTAINER_EXITED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %s after 30s", id, st.GetStatus().GetState())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if whileUp != nil {
		whileUp()
	}
	if _, err := e.RT.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := e.RT.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := e.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := e.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
}
