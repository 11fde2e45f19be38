package vk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/suite"
)

// TestPodLevelResources: a pod's spec.resources bound its containers
// together, in a pod cgroup cri-compose makes with the pod's limits. Its
// containers ask for nothing themselves; the one that takes memory without
// end is OOM-killed at the pod's limit while the other runs on, and the
// pod cgroup on the host holds the pod's CPU quota and memory limit.
func TestPodLevelResources(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	zero := int64(0)
	limits := v1.ResourceList{v1.ResourceCPU: resource.MustParse("300m"), v1.ResourceMemory: resource.MustParse("96Mi")}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pooled", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			RestartPolicy: v1.RestartPolicyNever,
			Resources:     &v1.ResourceRequirements{Limits: limits},
			Containers: []v1.Container{
				busybox("app", "exec sleep 12345"),
				// tail keeps the last ten lines, and /dev/zero has none.
				busybox("hog", "exec tail /dev/zero"),
			}},
	})
	var p *v1.Pod
	waitFor(t, "the hog killed, the app running", 2*time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		app, hog := containerStatus(p, "app"), containerStatus(p, "hog")
		return app != nil && app.State.Running != nil && hog != nil && hog.State.Terminated != nil, podSummary(p)
	})
	if p.Status.QOSClass != v1.PodQOSGuaranteed {
		t.Errorf("QoS class %s, want Guaranteed (from the pod's resources)", p.Status.QOSClass)
	}
	if term := containerStatus(p, "hog").State.Terminated; term.ExitCode != 137 {
		t.Errorf("hog terminated %+v, want killed (exit code 137) by the OOM killer at the pod's memory limit", term)
	}

	_, id, _ := strings.Cut(containerStatus(p, "app").ContainerID, "://")
	in, err := engine.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	parent := in.HostConfig.CgroupParent
	if !strings.HasPrefix(parent, "/cri-compose/") {
		t.Fatalf("the app's cgroup parent is %q, want a pod cgroup of cri-compose's", parent)
	}
	mem, cpu, err := suite.HostCgroupLimits(parent)
	if err != nil {
		t.Fatalf("read the pod cgroup: %v", err)
	}
	if want := fmt.Sprint(96 << 20); mem != want {
		t.Errorf("pod cgroup %s: memory limit %s, want %s", parent, mem, want)
	}
	if cpu != "30000 100000" {
		t.Errorf("pod cgroup %s: CPU quota and period %q, want \"30000 100000\"", parent, cpu)
	}

	deletePod(t, ns, pod.Name, time.Minute)
	waitFor(t, "the pod cgroup removed with the pod", time.Minute, func() (bool, string) {
		dirs := suite.HostCgroupPaths(parent)
		return len(dirs) == 0, fmt.Sprintf("%s: %v", parent, dirs)
	})
}
