package vk

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestOOMScoreAdj(t *testing.T) {
	const capacity = 10 << 30 // 10 GiB
	mem := func(q string) v1.ResourceRequirements {
		return v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse(q)}}
	}
	always := v1.ContainerRestartPolicyAlways
	prio := int32(systemCriticalPriority)
	pod := func(qos v1.PodQOSClass, cs ...v1.Container) *v1.Pod {
		return &v1.Pod{Spec: v1.PodSpec{Containers: cs}, Status: v1.PodStatus{QOSClass: qos}}
	}
	withSidecar := func(p *v1.Pod, c v1.Container) *v1.Pod {
		c.RestartPolicy = &always
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		return p
	}
	tests := []struct {
		name string
		pod  *v1.Pod
		c    string
		want int64
	}{
		{"guaranteed", pod(v1.PodQOSGuaranteed, v1.Container{Name: "a", Resources: mem("1Gi")}), "a", -997},
		{"best effort", pod(v1.PodQOSBestEffort, v1.Container{Name: "a"}), "a", 1000},
		// 1000 - 1000*1Gi/10Gi.
		{"burstable", pod(v1.PodQOSBurstable, v1.Container{Name: "a", Resources: mem("1Gi")}), "a", 900},
		// Kept below BestEffort's 1000 ...
		{"burstable without a memory request", pod(v1.PodQOSBurstable, v1.Container{Name: "a"}, v1.Container{Name: "b", Resources: mem("1Gi")}), "a", 999},
		// ... and above Guaranteed's.
		{"burstable asking for the node", pod(v1.PodQOSBurstable, v1.Container{Name: "a", Resources: mem("10Gi")}), "a", 3},
		{"node critical", func() *v1.Pod {
			p := pod(v1.PodQOSBestEffort, v1.Container{Name: "a"})
			p.Spec.Priority, p.Spec.PriorityClassName = &prio, systemNodeCritical
			return p
		}(), "a", -997},
		{"critical priority of another class", func() *v1.Pod {
			p := pod(v1.PodQOSBestEffort, v1.Container{Name: "a"})
			p.Spec.Priority, p.Spec.PriorityClassName = &prio, "system-cluster-critical"
			return p
		}(), "a", 1000},
		// The sidecar asks less than the app it serves: the app's score.
		{"sidecar", withSidecar(pod(v1.PodQOSBurstable, v1.Container{Name: "a", Resources: mem("2Gi")}, v1.Container{Name: "b", Resources: mem("1Gi")}),
			v1.Container{Name: "s", Resources: mem("100Mi")}), "s", 900},
		{"sidecar asking more", withSidecar(pod(v1.PodQOSBurstable, v1.Container{Name: "a", Resources: mem("1Gi")}),
			v1.Container{Name: "s", Resources: mem("3Gi")}), "s", 700},
		// 2Gi at pod level, 1Gi of it asked by a: the other 1Gi shared by
		// the two containers, 512Mi each.
		{"pod-level request", func() *v1.Pod {
			p := pod(v1.PodQOSBurstable, v1.Container{Name: "a", Resources: mem("1Gi")}, v1.Container{Name: "b"})
			p.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")}}
			return p
		}(), "b", 950},
		{"no QoS class", pod("", v1.Container{Name: "a", Resources: mem("1Gi")}), "a", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c *v1.Container
			for _, cs := range [][]v1.Container{tc.pod.Spec.InitContainers, tc.pod.Spec.Containers} {
				for i := range cs {
					if cs[i].Name == tc.c {
						c = &cs[i]
					}
				}
			}
			if got := oomScoreAdj(tc.pod, c, capacity); got != tc.want {
				t.Errorf("oomScoreAdj = %d, want %d", got, tc.want)
			}
		})
	}
}
