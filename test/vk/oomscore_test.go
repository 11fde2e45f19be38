package vk_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOOMScoreAdj: every container's processes get kubelet's OOM score
// adjustment for its pod's QoS class, read from /proc/1/oom_score_adj
// inside it: -997 when Guaranteed, 1000 when BestEffort, and when
// Burstable 1000 less its memory request's share of the node's capacity
// per mille, a sidecar no higher than the app it serves. On a host whose
// capability bounding set lacks CAP_SYS_RESOURCE, runc cannot lower a
// score, and cri-compose raises Guaranteed's to 0.
func TestOOMScoreAdj(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	zero := int64(0)
	always := v1.ContainerRestartPolicyAlways
	spec := func(cs []v1.Container, init ...v1.Container) v1.PodSpec {
		return v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			InitContainers: init, Containers: cs}
	}

	guaranteed := busybox("app", "exec sleep 12345")
	guaranteed.Resources = resources("100m", "64Mi", "100m", "64Mi")
	besteffort := busybox("app", "exec sleep 12345")
	burstable := busybox("app", "exec sleep 12345")
	burstable.Resources = resources("100m", "512Mi", "200m", "1Gi")
	small := busybox("small", "exec sleep 12345")
	small.Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("256Mi")}
	sidecar := busybox("sidecar", "exec sleep 12345")
	sidecar.RestartPolicy = &always
	sidecar.Resources.Requests = v1.ResourceList{v1.ResourceMemory: resource.MustParse("8Mi")}
	pods := map[string]v1.PodSpec{
		"guaranteed": spec([]v1.Container{guaranteed}),
		"besteffort": spec([]v1.Container{besteffort}),
		"burstable":  spec([]v1.Container{burstable, small}, sidecar),
	}
	for name, s := range pods {
		createPod(t, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: s})
	}

	node, err := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	capacity := node.Status.Capacity.Memory().Value()
	burst := func(request string) int64 {
		q := resource.MustParse(request)
		return 1000 - 1000*q.Value()/capacity
	}
	guaranteedAdj := int64(-997)
	if !canLowerOOMScore(t) {
		guaranteedAdj = 0
	}
	want := []struct {
		pod, container string
		qos            v1.PodQOSClass
		adj            int64
	}{
		{"guaranteed", "app", v1.PodQOSGuaranteed, guaranteedAdj},
		{"besteffort", "app", v1.PodQOSBestEffort, 1000},
		{"burstable", "app", v1.PodQOSBurstable, burst("512Mi")},
		{"burstable", "small", v1.PodQOSBurstable, burst("256Mi")},
		// Its own request would give it a higher score than "small", the
		// app with the least memory asked.
		{"burstable", "sidecar", v1.PodQOSBurstable, burst("256Mi")},
	}
	for _, w := range want {
		p := waitRunning(t, ns, w.pod)
		if p.Status.QOSClass != w.qos {
			t.Fatalf("%s: QoS class %s, want %s", w.pod, p.Status.QOSClass, w.qos)
		}
		got := strings.TrimSpace(execIn(t, p, w.container, "cat", "/proc/1/oom_score_adj"))
		if got != strconv.FormatInt(w.adj, 10) {
			t.Errorf("%s/%s (%s, node memory %d): oom_score_adj %s, want %d", w.pod, w.container, w.qos, capacity, got, w.adj)
		}
	}
}

// canLowerOOMScore says whether this host's capability bounding set has
// CAP_SYS_RESOURCE (bit 24), which lowering an oom_score_adj takes.
func canLowerOOMScore(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			bnd, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapBnd %q: %v", v, err)
			}
			return bnd&(1<<24) != 0
		}
	}
	t.Fatal("no CapBnd in /proc/self/status")
	return false
}
