package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
)

const (
	// Network is the pod network of the in-process servers, shared by
	// all runs and left in place.
	Network = "cri-compose-test"
	// Image is the busybox image their containers run, loaded by
	// StartServer.
	Image = "localhost/cri-compose/test-busybox:cri-test"
)

// Serve serves what register registers on a gRPC server on a fresh unix
// socket and returns a client of it; stop (also run when t ends) stops
// the server gracefully and closes the client.
func Serve(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) (conn *grpc.ClientConn, sock string, stop func()) {
	t.Helper()
	sock = filepath.Join(SocketDir(t), "cri.sock")
	l, err := cri.Listen("unix://"+sock, "")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer(opts...)
	register(gs)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(l) }()
	if conn, err = Dial("unix://" + sock); err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		conn.Close()
		gs.GracefulStop()
		<-served
	})
	t.Cleanup(stop)
	return conn, sock, stop
}

// SocketDir is a directory for a unix socket: t.TempDir when its path
// fits a socket address (108 bytes), a short temporary one otherwise.
func SocketDir(t testing.TB) string {
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

// ServerOptions shape an in-process server.
type ServerOptions struct {
	Config cri.Config          // StateDir defaults to a fresh folder, Network to Network
	Docker []dockerapi.Option  // options of the engine client
	GRPC   []grpc.ServerOption // options of the gRPC server
	// Setup (if not nil) sees the server before it runs, e.g. to
	// register its collectors.
	Setup func(*cri.Server)
}

// Server is a real cri.Server on the real engine, run in the test's process
// behind a gRPC server on a unix socket, and its clients: tests call it
// from outside the way kubelet and crictl do; nothing is mocked.
type Server struct {
	T      testing.TB
	Docker *dockerapi.Client
	Opts   ServerOptions
	Srv    *cri.Server
	Conn   *grpc.ClientConn
	RT     runtime.RuntimeServiceClient
	Img    runtime.ImageServiceClient
	Socket string

	stop func()
}

// StateDir is the server's state dir.
func (s *Server) StateDir() string { return s.Opts.Config.StateDir }

// StartServer loads the busybox image, serves a new cri.Server until t ends
// and waits until it reports ready. With no engine or no busybox it skips
// t (fails it in CI).
func StartServer(t testing.TB, o ServerOptions) *Server {
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
	needBusybox(t, d)
	if o.Config.StateDir == "" {
		o.Config.StateDir = t.TempDir()
	}
	if o.Config.Network == "" {
		o.Config.Network = Network
	}
	s := &Server{T: t, Docker: d, Opts: o}
	s.Start()
	return s
}

var busybox struct {
	sync.Mutex
	loaded bool
}

// needBusybox loads Image once per test process.
func needBusybox(t testing.TB, d *dockerapi.Client) {
	t.Helper()
	busybox.Lock()
	defer busybox.Unlock()
	if !busybox.loaded {
		images.NeedBusybox(t, d, Image)
		busybox.loaded = true
	}
}

// Start serves a new cri.Server on the server's state dir (after Stop: a
// restart) and waits until it reports ready.
func (s *Server) Start() {
	t := s.T
	t.Helper()
	s.Srv = cri.NewServer(s.Opts.Config, s.Docker)
	if s.Opts.Setup != nil {
		s.Opts.Setup(s.Srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan struct{})
	go func() { defer close(runDone); s.Srv.Run(ctx) }()
	conn, sock, stopServing := Serve(t, s.Srv.Register, s.Opts.GRPC...)
	s.Conn, s.Socket = conn, sock
	s.RT, s.Img = runtime.NewRuntimeServiceClient(conn), runtime.NewImageServiceClient(conn)
	s.stop = sync.OnceFunc(func() {
		cancel()
		stopServing()
		// Run returns once its log pumps have stopped: only then may
		// another server take over the state dir and the log files.
		select {
		case <-runDone:
		case <-time.After(30 * time.Second):
			t.Errorf("Server.Run did not return 30s after its context ended")
		}
	})
	t.Cleanup(s.stop)
	if err := WaitReady(s.RT, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the server (the engine and its pods go on).
func (s *Server) Stop() { s.stop() }

// Restart stops the server and starts a new one on the same state dir
// and network; between the two, down runs (if not nil).
func (s *Server) Restart(down func()) {
	s.T.Helper()
	s.Stop()
	if down != nil {
		down()
	}
	s.Start()
}

// PodConfig is a pod with a unique name, logging to a fresh folder; the
// engine's containers of its project are removed when the test ends,
// whatever the test did.
func (s *Server) PodConfig(name string) *runtime.PodSandboxConfig {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	cfg := &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: name + "-" + suffix, Namespace: "cri-test", Uid: "uid-" + suffix},
		Hostname:     name,
		LogDirectory: s.T.TempDir(),
	}
	project := sandbox.ProjectName(cfg.GetMetadata())
	s.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, _ := s.Docker.ContainerList(ctx, sandbox.LabelProject+"="+project)
		for _, c := range list {
			_ = s.Docker.ContainerRemove(ctx, c.ID)
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
func (s *Server) Lifecycle(ctx context.Context, name string, whileUp func()) {
	t := s.T
	t.Helper()
	pod := s.PodConfig(name)
	run, err := s.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: pod})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	podID := run.GetPodSandboxId()
	cr, err := s.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{
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
	if _, err := s.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	Eventually(t, "container "+id+" to exit", 30*time.Second, func() (bool, string) {
		st, err := s.RT.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		return st.GetStatus().GetState() == runtime.ContainerState_CONTAINER_EXITED, st.GetStatus().GetState().String()
	})
	if whileUp != nil {
		whileUp()
	}
	if _, err := s.RT.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: id, Timeout: 5}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if _, err := s.RT.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	if _, err := s.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := s.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
}
