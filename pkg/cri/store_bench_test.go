package cri

import (
	"context"
	"fmt"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/store"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// The list handlers and the stats sampler's walks over the store, with the
// store holding n pods of one running container each, built the way
// Refresh builds them (no engine needed). test/bench measures the same
// through gRPC on the real engine (BENCHMARKS.md); these isolate the
// handler's own cost.

func benchStore(b *testing.B, n int) *Server {
	b.Helper()
	st := store.New(nil, store.Options{Network: "bench"})
	h := sandbox.Host{Network: "bench", InfraImage: "localhost/cri-compose/pause:bench", StateDir: "/var/lib/cri-compose"}
	now := time.Now().UnixNano()
	for i := range n {
		pc := &runtime.PodSandboxConfig{
			Metadata:     &runtime.PodSandboxMetadata{Name: fmt.Sprintf("pod-%d", i), Namespace: "bench", Uid: fmt.Sprintf("uid-%d", i)},
			LogDirectory: fmt.Sprintf("/var/log/pods/bench_pod-%d_uid-%d", i, i),
			Labels:       map[string]string{"app": "bench", "pod-template-hash": "5d8f9c7b6"},
			Annotations:  map[string]string{"kubernetes.io/config.source": "api"},
			Linux:        &runtime.LinuxPodSandboxConfig{},
		}
		spec, err := sandbox.SandboxSpec(pc, h)
		if err != nil {
			b.Fatal(err)
		}
		sbID := fmt.Sprintf("%064x", 2*i)
		sbSvc := sandbox.Service(sandbox.InfraService, spec.Config, spec.HostConfig)
		if err := st.AddSandbox(&store.SandboxMetadata{ID: sbID, Project: spec.Project, Config: pc, CreatedAt: now + int64(i), Network: "bench"},
			store.SandboxStatus{State: runtime.PodSandboxState_SANDBOX_READY, IP: "10.0.0.1", Pid: 1000 + i, Service: &sbSvc}); err != nil {
			b.Fatal(err)
		}
		cc := &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "sleep"}, Image: &runtime.ImageSpec{Image: "busybox"},
			Command: []string{"sleep", "86400"}, LogPath: "sleep.log", Labels: map[string]string{"io.kubernetes.container.name": "sleep"},
			Linux: &runtime.LinuxContainerConfig{}}
		cspec, err := sandbox.ContainerSpec(sandbox.ContainerInput{SandboxID: sbID, Sandbox: pc, Config: cc,
			ImageID: "sha256:" + fmt.Sprintf("%064x", 0), ImageRef: "docker.io/library/busybox:latest"}, h)
		if err != nil {
			b.Fatal(err)
		}
		id := fmt.Sprintf("%064x", 2*i+1)
		svc := sandbox.Service(cspec.Service, cspec.Config, cspec.HostConfig)
		if err := st.AddContainer(&store.ContainerMetadata{ID: id, SandboxID: sbID, Project: spec.Project, Service: cspec.Service, Config: cc,
			Image: "docker.io/library/busybox:latest", ImageID: "sha256:0", LogPath: pc.LogDirectory + "/sleep.log",
			CreatedAt: now + int64(i)},
			store.ContainerStatus{State: runtime.ContainerState_CONTAINER_RUNNING, StartedAt: now, Pid: 2000 + i, ServiceCfg: &svc}); err != nil {
			b.Fatal(err)
		}
	}
	st.MarkSynced()
	return &Server{store: st}
}

func BenchmarkListContainers500(b *testing.B) {
	s := benchStore(b, 500)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := s.ListContainers(ctx, &runtime.ListContainersRequest{})
		if err != nil || len(r.Containers) != 500 {
			b.Fatal(err, len(r.GetContainers()))
		}
	}
}

func BenchmarkListPodSandbox500(b *testing.B) {
	s := benchStore(b, 500)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := s.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		if err != nil || len(r.Items) != 500 {
			b.Fatal(err, len(r.GetItems()))
		}
	}
}

// BenchmarkStatsTargets500 is the store walk of every sampling pass (once a
// second while stats are asked for).
func BenchmarkStatsTargets500(b *testing.B) {
	s := benchStore(b, 500)
	c := statsSource{s.store}
	b.ReportAllocs()
	for b.Loop() {
		if len(c.Targets()) != 1000 {
			b.Fatal("targets")
		}
	}
}
