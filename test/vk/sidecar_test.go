package vk_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSidecar: a sidecar (an init container with restartPolicy Always)
// with a startup probe on a file it makes after two seconds holds back
// the regular init container after it until the probe succeeds; its
// readiness probe counts in the pod's Ready; on delete its preStop hook
// runs and it gets SIGTERM only once the app container has stopped. Each
// container writes what it sees to a hostPath file, the order the test
// reads.
func TestSidecar(t *testing.T) {
	need(t)
	ns := namespace(t)
	dir, dataVol := hostDataVolume(t, "sidecar-"+ns)
	grace := int64(15)
	data := []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	always := v1.ContainerRestartPolicyAlways

	sidecar := busybox("proxy", `trap 'echo sidecar-term >> /data/order; exit 0' TERM; `+
		`echo sidecar-start >> /data/order; touch /tmp/ready; sleep 2; touch /data/started; `+
		`while true; do sleep 0.2; done`)
	sidecar.RestartPolicy = &always
	sidecar.VolumeMounts = data
	sidecar.StartupProbe = &v1.Probe{ProbeHandler: execAction("test", "-e", "/data/started"), PeriodSeconds: 1, FailureThreshold: 60}
	sidecar.ReadinessProbe = &v1.Probe{ProbeHandler: execAction("test", "-e", "/tmp/ready"), PeriodSeconds: 1, FailureThreshold: 1}
	sidecar.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{
		Command: []string{"sh", "-c", "echo sidecar-prestop >> /data/order"}}}}
	// The regular init container says whether the sidecar had started
	// (made its file) when it ran.
	init := busybox("init", `if [ -e /data/started ]; then echo init-after-started; else echo init-too-early; fi >> /data/order`)
	init.VolumeMounts = data
	// The app container takes a second to stop, so that a sidecar stopped
	// too soon would show.
	app := busybox("app", `trap 'sleep 1; echo app-term >> /data/order; exit 0' TERM; echo app-start >> /data/order; `+
		`while true; do sleep 0.2; done`)
	app.VolumeMounts = data

	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sidecar", Namespace: ns},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			InitContainers:                []v1.Container{sidecar, init},
			Containers:                    []v1.Container{app},
			Volumes:                       []v1.Volume{dataVol},
		},
	})
	order := func() []string {
		b, err := os.ReadFile(filepath.Join(dir, "order"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.Fields(string(b))
	}

	p := waitPod(t, ns, pod.Name, "pod Ready", 90*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionTrue
	})
	// Ready says the app container runs, not that its shell has written
	// yet.
	waitFor(t, "the app's start in the order file", 30*time.Second, func() (bool, string) {
		got := order()
		return len(got) >= 3, fmt.Sprint(got)
	})
	if got := order(); !slices.Equal(got, []string{"sidecar-start", "init-after-started", "app-start"}) {
		t.Fatalf("start order %q: want the sidecar, the init container once it started, then the app", got)
	}
	cs := containerStatus(p, "proxy")
	if p.Status.Phase != v1.PodRunning || cs == nil || cs.State.Running == nil || cs.Started == nil || !*cs.Started || !cs.Ready || cs.RestartCount != 0 {
		t.Fatalf("Ready pod: %s", podSummary(p))
	}
	if cs := containerStatus(p, "init"); cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || !cs.Ready {
		t.Errorf("regular init container: %s", podSummary(p))
	}
	if condition(p, v1.PodInitialized) != v1.ConditionTrue || condition(p, v1.ContainersReady) != v1.ConditionTrue {
		t.Errorf("conditions: %s", podSummary(p))
	}

	// The sidecar's readiness is the pod's.
	_ = execIn(t, p, "proxy", "rm", "/tmp/ready")
	p = waitPod(t, ns, pod.Name, "pod unready with the sidecar", 30*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionFalse && condition(p, v1.ContainersReady) == v1.ConditionFalse && !ready(p, "proxy")
	})
	if !ready(p, "app") || p.Status.Phase != v1.PodRunning {
		t.Errorf("unready sidecar: %s", podSummary(p))
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady && c.Message != "containers with unready status: [proxy]" {
			t.Errorf("Ready condition %+v", c)
		}
	}
	if probeEvents(t, ns, pod.Name, "Unhealthy", "Readiness probe failed") == 0 {
		t.Error("no Unhealthy event for the sidecar's readiness probe")
	}

	took := deletePod(t, ns, pod.Name, time.Duration(grace+15)*time.Second)
	got := order()
	t.Logf("order %q; deleted in %v (grace %ds)", got, took.Round(time.Millisecond), grace)
	// As kubelet: every preStop hook runs at once; the sidecar's SIGTERM
	// waits until the app container has stopped.
	prestop, appTerm, sidecarTerm := slices.Index(got, "sidecar-prestop"), slices.Index(got, "app-term"), slices.Index(got, "sidecar-term")
	if prestop < 0 || appTerm < 0 || sidecarTerm < 0 || sidecarTerm < appTerm || sidecarTerm < prestop {
		t.Errorf("termination order %q: want the sidecar's preStop, and its SIGTERM after the app's", got)
	}
	if took > time.Duration(grace)*time.Second {
		t.Errorf("deletion took %v, beyond the %ds grace period", took, grace)
	}
}
