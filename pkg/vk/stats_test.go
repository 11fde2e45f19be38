package vk

import (
	"context"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestStatsFromContainerStats: a runtime without ListPodSandboxStats gets
// pods made of its containers' stats, summed, and the resource metrics
// carry kubelet's labels.
func TestStatsFromContainerStats(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	labels := map[string]string{labelNode: "node1"}
	sb, err := e.rt.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u1"}, Labels: labels}, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, name := range []string{"a", "b"} {
		id, err := e.rt.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: "busybox"}, Labels: labels}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.rt.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	stat := func(id string, cpu, mem uint64) *runtimeapi.ContainerStats {
		return &runtimeapi.ContainerStats{Attributes: &runtimeapi.ContainerAttributes{Id: id},
			Cpu:    &runtimeapi.CpuUsage{Timestamp: 1e18, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}, UsageNanoCores: &runtimeapi.UInt64Value{Value: cpu / 10}},
			Memory: &runtimeapi.MemoryUsage{Timestamp: 1e18, WorkingSetBytes: &runtimeapi.UInt64Value{Value: mem}}}
	}
	e.rt.SetFakeContainerStats([]*runtimeapi.ContainerStats{stat(ids[0], 3e9, 10<<20), stat(ids[1], 1e9, 5<<20)})
	for range 2 { // the fake's errors are used up one call each
		e.rt.InjectError("ListPodSandboxStats", status.Error(codes.Unimplemented, "no"))
	}

	s, err := e.p.GetStatsSummary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Node.NodeName != "node1" || s.Node.CPU == nil || s.Node.Memory == nil {
		t.Errorf("node: %+v", s.Node)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("%d pods, want 1", len(s.Pods))
	}
	pod := s.Pods[0]
	if pod.PodRef.Name != "web" || pod.PodRef.Namespace != "ns" || pod.PodRef.UID != "u1" {
		t.Errorf("pod ref %+v", pod.PodRef)
	}
	if pod.CPU == nil || *pod.CPU.UsageCoreNanoSeconds != 4e9 || *pod.CPU.UsageNanoCores != 4e8 ||
		pod.Memory == nil || *pod.Memory.WorkingSetBytes != 15<<20 {
		t.Errorf("pod CPU %+v memory %+v", pod.CPU, pod.Memory)
	}
	if len(pod.Containers) != 2 {
		t.Fatalf("%d containers, want 2", len(pod.Containers))
	}

	mfs, err := e.p.GetMetricsResource(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	find := func(name string, want map[string]string) *dto.Metric {
	next:
		for _, m := range got[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			return m
		}
		return nil
	}
	if m := find("container_cpu_usage_seconds_total", map[string]string{"container": "a", "pod": "web", "namespace": "ns"}); m.GetCounter().GetValue() != 3 || m.GetTimestampMs() == 0 {
		t.Errorf("container a CPU: %v", m)
	}
	// Labels from the outside in, for clients that read them by position.
	for _, name := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
		"container_start_time_seconds", "pod_cpu_usage_seconds_total"} {
		want := []string{"namespace", "pod", "container"}
		if strings.HasPrefix(name, "pod_") {
			want = want[:2]
		}
		for _, m := range got[name].GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
			}
			if !slices.Equal(names, want) {
				t.Errorf("%s labels %v, want %v", name, names, want)
			}
		}
	}
	if m := find("pod_memory_working_set_bytes", map[string]string{"pod": "web", "namespace": "ns"}); m.GetGauge().GetValue() != 15<<20 {
		t.Errorf("pod memory: %v", m)
	}
	if m := find("scrape_error", nil); m == nil || m.GetGauge().GetValue() != 0 {
		t.Errorf("scrape_error: %v", m)
	}
	for _, name := range []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes", "container_start_time_seconds"} {
		if find(name, nil) == nil {
			t.Errorf("no %s", name)
		}
	}
}
