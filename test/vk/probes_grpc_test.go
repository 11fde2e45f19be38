package vk_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/images"
)

// grpcHealthImage builds and loads an image of busybox plus
// /bin/grpchealth (./grpchealth, built static), a gRPC health server that
// answers NOT_SERVING while /tmp/unhealthy exists.
func grpcHealthImage(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ref := "localhost/cri-compose/vk-e2e-grpchealth:" + runID
	// ./grpchealth resolves in this module: go test runs in its folder.
	if err := images.BusyboxWithProgram(ctx, engine, ref, "./grpchealth", "/bin/grpchealth"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = engine.ImageRemove(ctx, ref, true)
	})
	return ref
}

// TestProbeGRPC: grpc readiness and liveness probes call the container's
// grpc.health.v1 service: SERVING makes it ready; NOT_SERVING makes it
// unready and, after the liveness threshold, restarts it, after which
// (a new container, without the flag file) it is ready again.
func TestProbeGRPC(t *testing.T) {
	need(t)
	ref := grpcHealthImage(t)
	ns := namespace(t)
	grace, probeGrace := int64(30), int64(1)
	c := v1.Container{
		Name: "health", Image: ref, ImagePullPolicy: v1.PullNever,
		Command: []string{"/bin/grpchealth", "-listen", ":9090"},
		Ports:   []v1.ContainerPort{{Name: "grpc", ContainerPort: 9090}},
		ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9090}},
			PeriodSeconds: 1, FailureThreshold: 1},
		// Three failures to kill: the first probe may come before the
		// server listens.
		LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9090}},
			PeriodSeconds: 1, FailureThreshold: 3, TerminationGracePeriodSeconds: &probeGrace},
	}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "grpc", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{c}},
	})
	p := waitPod(t, ns, pod.Name, "ready through its grpc probe", 60*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionTrue && ready(p, "health")
	})
	first := containerStatus(p, "health").ContainerID

	start := time.Now()
	_ = execIn(t, p, "health", "touch", "/tmp/unhealthy")
	waitPod(t, ns, pod.Name, "unready on NOT_SERVING", 30*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionFalse && !ready(p, "health")
	})
	p = waitPod(t, ns, pod.Name, "restarted by its grpc liveness probe", 60*time.Second, func(p *v1.Pod) bool {
		cs := containerStatus(p, "health")
		return cs.RestartCount >= 1 && cs.Ready
	})
	cs := containerStatus(p, "health")
	lt := cs.LastTerminationState.Terminated
	if lt == nil || lt.ContainerID != first || !strings.Contains(lt.Message, "failed liveness probe, will be restarted") {
		t.Fatalf("lastState %+v", cs.LastTerminationState)
	}
	t.Logf("unhealthy → restarted and ready again in %v", time.Since(start).Round(time.Millisecond))
	if n := probeEvents(t, ns, pod.Name, "Unhealthy", `Liveness probe failed: service unhealthy (responded with "NOT_SERVING")`); n == 0 {
		t.Error(`no Unhealthy event with the server's answer ("NOT_SERVING")`)
	}
}
