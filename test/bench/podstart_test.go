// Package bench measures cri-compose against the floor any Docker-backed
// runtime has: the same Engine API calls made directly. Both run in one
// process, in one run, so their ratio is the result (absolute times drift).
package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/test/images"
)

const busybox = "localhost/cri-compose/test-busybox:bench"

// server starts cri-compose in process on a unix socket and returns a
// client of it.
func server(b *testing.B, d *dockerapi.Client, network string) runtime.RuntimeServiceClient {
	dir := b.TempDir()
	srv := cri.NewServer(cri.Config{StateDir: filepath.Join(dir, "state"), Network: network}, d)
	l, err := cri.Listen("unix://"+filepath.Join(dir, "cri.sock"), "")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	go g.Serve(l)
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "cri.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dir, "cri.sock"))
		}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(); g.Stop(); cancel(); <-done })
	c := runtime.NewRuntimeServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Status(context.Background(), &runtime.StatusRequest{})
		if err == nil && st.GetStatus().GetConditions()[0].GetStatus() {
			return c
		}
		if time.Now().After(deadline) {
			b.Fatalf("cri-compose never became ready: %v %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// latencies collects one duration per pod and reports p50/p90 in ms.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(l[len(l)*9/10].Microseconds())/1000, "p90-ms")
}

// BenchmarkPodStart: RunPodSandbox + CreateContainer + StartContainer of a
// one-container pod through cri-compose, and the same engine calls made
// directly (create + start a pause container on the pod network, create +
// start a busybox container joined to its namespaces).
func BenchmarkPodStart(b *testing.B) {
	d := images.Engine(b)
	images.NeedBusybox(b, d, busybox)
	ctx := context.Background()
	if err := pause.Ensure(ctx, d); err != nil {
		b.Fatal(err)
	}
	netName := fmt.Sprintf("cc-bench-%d", time.Now().UnixNano()%1e6)
	if _, err := d.EnsureNetwork(ctx, netName, netip.Prefix{}, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = d.NetworkRemove(context.Background(), netName) })

	b.Run("cri-compose", func(b *testing.B) {
		c := server(b, d, netName)
		logDir := b.TempDir()
		var lat latencies
		for i := 0; b.Loop(); i++ {
			uid := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
			pc := &runtime.PodSandboxConfig{
				Metadata:     &runtime.PodSandboxMetadata{Name: "bench-" + uid, Namespace: "bench", Uid: uid},
				LogDirectory: filepath.Join(logDir, uid), Linux: &runtime.LinuxPodSandboxConfig{},
			}
			start := time.Now()
			sb, err := c.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: pc})
			if err != nil {
				b.Fatal(err)
			}
			ct, err := c.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc,
				Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "sleep"}, Image: &runtime.ImageSpec{Image: busybox},
					Command: []string{"sleep", "3600"}, LogPath: "sleep.log", Linux: &runtime.LinuxContainerConfig{}}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: ct.ContainerId}); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			_, _ = c.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})
			_, _ = c.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
			b.StartTimer()
		}
		lat.report(b)
	})

	b.Run("engine-floor", func(b *testing.B) {
		var lat latencies
		for i := 0; b.Loop(); i++ {
			name := fmt.Sprintf("cc-bench-floor-%d-%d", time.Now().UnixNano(), i)
			start := time.Now()
			infra, err := d.ContainerCreate(ctx, name+"-pod",
				&container.Config{Image: pause.Ref(), Labels: map[string]string{"cri-compose.bench": "floor"}},
				&container.HostConfig{NetworkMode: container.NetworkMode(netName), IpcMode: "shareable", LogConfig: container.LogConfig{Type: "none"}},
				&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {}}})
			if err != nil {
				b.Fatal(err)
			}
			if err := d.ContainerStart(ctx, infra); err != nil {
				b.Fatal(err)
			}
			join := container.NetworkMode("container:" + infra)
			app, err := d.ContainerCreate(ctx, name+"-sleep",
				&container.Config{Image: busybox, Cmd: []string{"sleep", "3600"}, Labels: map[string]string{"cri-compose.bench": "floor"}},
				&container.HostConfig{NetworkMode: join, IpcMode: container.IpcMode(join), PidMode: container.PidMode(join),
					LogConfig: container.LogConfig{Type: "local"}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := d.ContainerStart(ctx, app); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
			b.StopTimer()
			_ = d.ContainerRemove(ctx, app)
			_ = d.ContainerRemove(ctx, infra)
			b.StartTimer()
		}
		lat.report(b)
	})
}
