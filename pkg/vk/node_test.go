package vk

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseReserved(t *testing.T) {
	got, err := ParseReserved(" cpu=100m, memory=256Mi,ephemeral-storage=1Gi,pid=1000,")
	if err != nil {
		t.Fatal(err)
	}
	want := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("256Mi"),
		v1.ResourceEphemeralStorage: resource.MustParse("1Gi"), resourcePID: resource.MustParse("1000"),
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for name, q := range want {
		if g := got[name]; g.Cmp(q) != 0 {
			t.Errorf("%s = %s, want %s", name, g.String(), q.String())
		}
	}
	// As kubelet: CPU to the nearest millicore.
	if got, err := ParseReserved("cpu=0.0004"); err != nil || got.Cpu().MilliValue() != 0 {
		t.Errorf("cpu=0.0004: %v %v", got, err)
	}
	if got, err := ParseReserved("cpu=1500u"); err != nil || got.Cpu().MilliValue() != 2 {
		t.Errorf("cpu=1500u: %v %v", got, err)
	}
	if got, err := ParseReserved(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
	for bad, msg := range map[string]string{
		"cpu":           "malformed pair",
		"gpu=1":         `cannot reserve "gpu" resource`,
		"pods=3":        `cannot reserve "pods" resource`,
		"memory=lots":   "failed to parse quantity",
		"memory=-256Mi": "cannot be negative",
	} {
		if _, err := ParseReserved(bad); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseReserved(%q) = %v, want an error with %q", bad, err, msg)
		}
	}
}

func TestAllocatable(t *testing.T) {
	capacity := v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods: resource.MustParse("110"),
	}
	kube := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("256Mi"),
		resourcePID: resource.MustParse("1000"), v1.ResourceEphemeralStorage: resource.MustParse("1Gi")}
	system := v1.ResourceList{v1.ResourceCPU: resource.MustParse("400m")}
	reserved := reservation(capacity, kube, system)
	// Only what the node has a capacity of: no pid, no ephemeral-storage.
	if len(reserved) != 2 || reserved.Cpu().MilliValue() != 500 || reserved.Memory().Value() != 256<<20 {
		t.Fatalf("reservation %v", reserved)
	}
	if err := checkReservation(capacity, reserved); err != nil {
		t.Fatal(err)
	}
	alloc := allocatable(capacity, reserved)
	if alloc.Cpu().MilliValue() != 1500 || alloc.Memory().Value() != 4<<30-256<<20 || alloc.Pods().Value() != 110 {
		t.Errorf("allocatable %v", alloc)
	}
	if capacity.Cpu().MilliValue() != 2000 {
		t.Error("capacity changed")
	}

	over := reservation(capacity, v1.ResourceList{v1.ResourceMemory: resource.MustParse("5Gi")})
	err := checkReservation(capacity, over)
	if err == nil || !strings.Contains(err.Error(), `Resource "memory" has a reservation of 5Gi but capacity of 4Gi`) {
		t.Errorf("reservation beyond capacity: %v", err)
	}
	if alloc := allocatable(capacity, over); alloc.Memory().Sign() != 0 {
		t.Errorf("allocatable memory %s, want 0", alloc.Memory())
	}
}

// TestConfigureNodeReserved checks the node's allocatable from the flags,
// and that reserving more than the capacity is refused.
func TestConfigureNodeReserved(t *testing.T) {
	e := newTestEnv(t)
	kube, err := ParseReserved("cpu=100m,memory=64Mi,pid=100")
	if err != nil {
		t.Fatal(err)
	}
	system, _ := ParseReserved("memory=64Mi")
	n := &v1.Node{}
	if err := e.p.ConfigureNode(context.Background(), n, NodeConfig{Pods: 10, KubeReserved: kube, SystemReserved: system}); err != nil {
		t.Fatal(err)
	}
	c, a := n.Status.Capacity, n.Status.Allocatable
	if a.Cpu().MilliValue() != c.Cpu().MilliValue()-100 || a.Memory().Value() != c.Memory().Value()-128<<20 || a.Pods().Value() != 10 {
		t.Errorf("capacity %v, allocatable %v", c, a)
	}
	if _, ok := a[resourcePID]; ok {
		t.Error("allocatable has pid")
	}

	huge, _ := ParseReserved("cpu=100000")
	if err := e.p.ConfigureNode(context.Background(), &v1.Node{}, NodeConfig{Pods: 10, SystemReserved: huge}); err == nil ||
		!strings.Contains(err.Error(), "invalid Node Allocatable configuration") {
		t.Errorf("100000 CPUs reserved: %v", err)
	}
}
