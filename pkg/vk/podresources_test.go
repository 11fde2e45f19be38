package vk

import (
	"testing"

	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodSandboxResources(t *testing.T) {
	list := quantities
	pod := func(qos v1.PodQOSClass, podRes *v1.ResourceRequirements, cs ...v1.ResourceRequirements) *v1.Pod {
		p := &v1.Pod{Spec: v1.PodSpec{Resources: podRes}, Status: v1.PodStatus{QOSClass: qos}}
		for _, r := range cs {
			p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "c", Resources: r})
		}
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		want *runtimeapi.LinuxContainerResources
	}{
		{"no pod-level resources", pod(v1.PodQOSGuaranteed, nil, v1.ResourceRequirements{Limits: list("1", "1Gi"), Requests: list("1", "1Gi")}), nil},
		{"guaranteed", pod(v1.PodQOSGuaranteed, &v1.ResourceRequirements{Limits: list("300m", "96Mi"), Requests: list("300m", "96Mi")}, v1.ResourceRequirements{}),
			&runtimeapi.LinuxContainerResources{CpuShares: 307, CpuPeriod: 100000, CpuQuota: 30000, MemoryLimitInBytes: 96 << 20}},
		// Burstable: the CPU limit at pod level; memory limited by no one.
		{"burstable, CPU limited", pod(v1.PodQOSBurstable, &v1.ResourceRequirements{Limits: list("500m", ""), Requests: list("200m", "64Mi")}, v1.ResourceRequirements{}),
			&runtimeapi.LinuxContainerResources{CpuShares: 204, CpuPeriod: 100000, CpuQuota: 50000}},
		// ... or memory limited by every container.
		{"burstable, containers' memory limits", pod(v1.PodQOSBurstable, &v1.ResourceRequirements{Requests: list("100m", "")},
			v1.ResourceRequirements{Limits: list("", "32Mi")}, v1.ResourceRequirements{Limits: list("", "16Mi")}),
			&runtimeapi.LinuxContainerResources{CpuShares: 102, MemoryLimitInBytes: 48 << 20}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := podSandboxResources(tc.pod); !proto.Equal(got, tc.want) {
				t.Errorf("podSandboxResources = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAdmitPodLevelResources(t *testing.T) {
	withPodRes := &v1.Pod{Spec: v1.PodSpec{Resources: &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}}}}
	plain := &v1.Pod{}
	p := &Provider{}
	if ok, reason, msg := p.admitPodLevelResources(withPodRes); ok || reason != "PodLevelResourcesNotSupported" {
		t.Errorf("before the runtime's features are read: %v %s %q, want refused", ok, reason, msg)
	}
	p.notePodLevelResources(hostInfo{podLevelWhyNot: "the engine is on another host"})
	ok, reason, msg := p.admitPodLevelResources(withPodRes)
	if ok || reason != "PodLevelResourcesNotSupported" || msg != "pod-level resources are not supported on the node: the engine is on another host" {
		t.Errorf("runtime cannot: %v %s %q, want refused with the runtime's reason", ok, reason, msg)
	}
	if ok, _, _ := p.admitPodLevelResources(plain); !ok {
		t.Error("a pod without pod-level resources refused")
	}
	p.notePodLevelResources(hostInfo{podLevelResources: true})
	if ok, reason, msg := p.admitPodLevelResources(withPodRes); !ok {
		t.Errorf("runtime can: refused with %s %q", reason, msg)
	}
}
