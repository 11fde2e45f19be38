package vk_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/cri-compose/cri-compose/test/suite"
)

// Probes and lifecycle hooks, end to end: vk-cri runs them against real
// containers of cri-compose, and the API server sees their effect. A
// test changes a container from the inside with execIn (volumes_test.go).

func execAction(cmd ...string) v1.ProbeHandler {
	return v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}
}

// waitPod waits until cond holds for the pod as the API server has it.
func waitPod(t *testing.T, ns, name, what string, d time.Duration, cond func(p *v1.Pod) bool) *v1.Pod {
	t.Helper()
	var p *v1.Pod
	waitFor(t, what, d, func() (bool, string) {
		p = getPod(t, ns, name)
		return cond(p), podSummary(p)
	})
	return p
}

// probeEvents counts the pod's events with reason whose message starts
// with prefix (repeats included).
func probeEvents(t *testing.T, ns, pod, reason, prefix string) int32 {
	t.Helper()
	evs, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	var n int32
	for _, e := range evs.Items {
		if e.Reason == reason && strings.HasPrefix(e.Message, prefix) {
			n += max(e.Count, 1)
		}
	}
	return n
}

func ready(p *v1.Pod, container string) bool {
	cs := containerStatus(p, container)
	return cs != nil && cs.Ready
}

// TestProbeReadiness: an exec readiness probe keeps its container unready
// until a file appears and again once it is gone; an httpGet readiness
// probe (by port name) against busybox httpd makes its container ready; a
// tcpSocket liveness probe on the same port leaves it running. The pod is
// Ready only while both are.
func TestProbeReadiness(t *testing.T) {
	need(t)
	ns := namespace(t)
	zero := int64(0)
	worker := busybox("worker", `trap 'exit 0' TERM; while true; do sleep 0.2; done`)
	worker.ReadinessProbe = &v1.Probe{ProbeHandler: execAction("test", "-e", "/tmp/ready"), PeriodSeconds: 1, FailureThreshold: 1}
	web := busybox("web", `mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www`)
	web.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	web.ReadinessProbe = &v1.Probe{
		ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"),
			HTTPHeaders: []v1.HTTPHeader{{Name: "X-Test", Value: "probe"}}}},
		PeriodSeconds: 1,
	}
	// Three failures in a row to kill: the first probe may come before
	// httpd listens.
	web.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 3}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "readiness", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &zero, Containers: []v1.Container{worker, web}},
	})

	p := waitPod(t, ns, pod.Name, "web ready", 60*time.Second, func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && ready(p, "web")
	})
	// The worker's probe has failed at least once: it is unready, and so
	// is the pod.
	waitFor(t, "a failed readiness probe", 30*time.Second, func() (bool, string) {
		return probeEvents(t, ns, pod.Name, "Unhealthy", "Readiness probe failed") > 0, "no Unhealthy event"
	})
	p = getPod(t, ns, pod.Name)
	if ready(p, "worker") || condition(p, v1.PodReady) != v1.ConditionFalse || condition(p, v1.ContainersReady) != v1.ConditionFalse {
		t.Fatalf("ready without /tmp/ready: %s", podSummary(p))
	}
	if cs := containerStatus(p, "worker"); cs.Started == nil || !*cs.Started || cs.State.Running == nil {
		t.Fatalf("worker not running and started: %s", podSummary(p))
	}

	start := time.Now()
	_ = execIn(t, p, "worker", "touch", "/tmp/ready")
	waitPod(t, ns, pod.Name, "pod Ready", 30*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionTrue && condition(p, v1.ContainersReady) == v1.ConditionTrue && ready(p, "worker")
	})
	t.Logf("Ready %v after the file appeared", time.Since(start).Round(time.Millisecond))

	_ = execIn(t, p, "worker", "rm", "/tmp/ready")
	p = waitPod(t, ns, pod.Name, "pod unready again", 30*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionFalse && !ready(p, "worker")
	})
	if cs := containerStatus(p, "web"); cs.RestartCount != 0 || !cs.Ready {
		t.Errorf("web under its tcpSocket liveness probe: %s", podSummary(p))
	}
}

// TestProbeRedirectWarning: an http liveness probe answered with a
// redirect to another host is not followed; as kubelet's, it counts as a
// success (the container is not restarted) and the pod gets a
// ProbeWarning event with the body of the answer.
func TestProbeRedirectWarning(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	zero := int64(0)
	// busybox httpd sends a CGI's output as it is when it starts with a
	// status line.
	web := busybox("web", `mkdir -p /www/cgi-bin
cat > /www/cgi-bin/redirect <<'EOF'
#!/bin/sh
printf 'HTTP/1.0 302 Found\r\nLocation: http://0.0.0.0/\r\nContent-Type: text/html\r\n\r\n<a href="http://0.0.0.0/">Found</a>.\n'
EOF
chmod +x /www/cgi-bin/redirect
exec httpd -f -p 8080 -h /www`)
	// The liveness probe starts once httpd listens (the startup probe),
	// and a slow answer on a loaded machine is no failure: what must not
	// fail it is the redirect, which every probe gets.
	web.StartupProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 60}
	web.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/cgi-bin/redirect", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 3}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "redirect", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &zero, Containers: []v1.Container{web}},
	})
	waitRunning(t, ns, pod.Name)
	waitFor(t, "a ProbeWarning event", 60*time.Second, func() (bool, string) {
		return probeEvents(t, ns, pod.Name, "ProbeWarning", `Liveness probe warning: Probe terminated redirects, Response body: <a href="http://0.0.0.0/">Found</a>.`) >= 3, "fewer than three"
	})
	p := getPod(t, ns, pod.Name)
	if cs := containerStatus(p, "web"); cs == nil || cs.RestartCount != 0 || cs.State.Running == nil {
		t.Fatalf("web restarted under a redirecting liveness probe: %s", podSummary(p))
	}
	if n := probeEvents(t, ns, pod.Name, "Unhealthy", "Liveness probe"); n != 0 {
		t.Errorf("%d Unhealthy events of the liveness probe, which only warned", n)
	}
}

// TestProbeLivenessRestarts: a failing exec liveness probe kills the
// container (within the probe's own grace period) and it is restarted:
// restartCount rises and lastState.terminated says why.
func TestProbeLivenessRestarts(t *testing.T) {
	need(t)
	ns := namespace(t)
	grace, probeGrace := int64(30), int64(1)
	// sh as pid 1 ignores SIGTERM: only the probe's 1 s grace makes the
	// kill quick.
	c := busybox("c", `touch /tmp/alive; while true; do sleep 0.2; done`)
	c.LivenessProbe = &v1.Probe{ProbeHandler: execAction("test", "-e", "/tmp/alive"),
		PeriodSeconds: 1, FailureThreshold: 2, TerminationGracePeriodSeconds: &probeGrace}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "liveness", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{c}},
	})
	p := waitPod(t, ns, pod.Name, "running", 60*time.Second, func(p *v1.Pod) bool { return ready(p, "c") })
	first := containerStatus(p, "c").ContainerID
	start := time.Now()
	_ = execIn(t, p, "c", "rm", "/tmp/alive")
	p = waitPod(t, ns, pod.Name, "restarted", 60*time.Second, func(p *v1.Pod) bool {
		cs := containerStatus(p, "c")
		return cs.RestartCount >= 1 && cs.State.Running != nil
	})
	took := time.Since(start)
	cs := containerStatus(p, "c")
	lt := cs.LastTerminationState.Terminated
	if lt == nil || lt.ContainerID != first || !strings.Contains(lt.Message, "failed liveness probe, will be restarted") || lt.ExitCode == 0 {
		t.Fatalf("lastState %+v", cs.LastTerminationState)
	}
	t.Logf("restarted %v after the file went (lastState %s, exit %d: %q)", took.Round(time.Millisecond), lt.Reason, lt.ExitCode, lt.Message)
	// Two failures a second apart, then at most the probe's grace, not
	// the pod's 30 s.
	if took > 15*time.Second {
		t.Errorf("the kill took %v: the probe's terminationGracePeriodSeconds was not used", took)
	}
	if n := probeEvents(t, ns, pod.Name, "Killing", "Container c failed liveness probe"); n == 0 {
		t.Error("no Killing event")
	}
}

// TestProbeStartupGates: while the startup probe has not succeeded, the
// container is neither started nor ready and its liveness probe (which
// would fail) does not run; once it succeeds, readiness follows.
func TestProbeStartupGates(t *testing.T) {
	need(t)
	ns := namespace(t)
	zero := int64(0)
	c := busybox("c", `trap 'exit 0' TERM; while true; do sleep 0.2; done`)
	// Generous timeouts: what is tested is the gate, and on a loaded
	// machine an exec can take more than the default second; a liveness
	// probe timed out once would restart the container (threshold 1) and
	// lose /tmp/started.
	c.StartupProbe = &v1.Probe{ProbeHandler: execAction("test", "-e", "/tmp/started"), PeriodSeconds: 1, FailureThreshold: 60, TimeoutSeconds: 10}
	c.LivenessProbe = &v1.Probe{ProbeHandler: execAction("test", "-e", "/tmp/started"), PeriodSeconds: 1, FailureThreshold: 1, TimeoutSeconds: 10}
	c.ReadinessProbe = &v1.Probe{ProbeHandler: execAction("true"), PeriodSeconds: 1}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "startup", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &zero, Containers: []v1.Container{c}},
	})
	// Three startup failures: time enough for an ungated liveness probe
	// to have killed it.
	waitFor(t, "three failed startup probes", 60*time.Second, func() (bool, string) {
		return probeEvents(t, ns, pod.Name, "Unhealthy", "Startup probe failed") >= 3, "fewer Unhealthy events"
	})
	p := getPod(t, ns, pod.Name)
	cs := containerStatus(p, "c")
	if cs.State.Running == nil || cs.Started == nil || *cs.Started || cs.Ready || condition(p, v1.PodReady) != v1.ConditionFalse {
		t.Fatalf("before startup: %s started=%v", podSummary(p), cs.Started)
	}
	_ = execIn(t, p, "c", "touch", "/tmp/started")
	p = waitPod(t, ns, pod.Name, "started and Ready", 30*time.Second, func(p *v1.Pod) bool {
		cs := containerStatus(p, "c")
		return cs.Started != nil && *cs.Started && cs.Ready && condition(p, v1.PodReady) == v1.ConditionTrue
	})
	if cs := containerStatus(p, "c"); cs.RestartCount != 0 {
		t.Errorf("restarted %d times: liveness ran before startup succeeded", cs.RestartCount)
	}
	if n := probeEvents(t, ns, pod.Name, "Unhealthy", "Liveness probe failed"); n != 0 {
		t.Errorf("%d liveness failures before startup", n)
	}
}

// TestHookPostStartPreStop: postStart runs right after the start (the
// container waits for its file and logs it); preStop runs on delete while
// the container still runs (it writes to a hostPath the test reads), and
// the pod is gone within its grace period.
func TestHookPostStartPreStop(t *testing.T) {
	need(t)
	ns := namespace(t)
	dir, dataVol := hostDataVolume(t, "hooks-"+ns)
	grace := int64(10)
	c := busybox("c", `while [ ! -e /tmp/poststart ]; do sleep 0.1; done; echo saw $(cat /tmp/poststart); `+
		`trap 'echo term >> /data/order; exit 0' TERM; while true; do sleep 0.2; done`)
	c.VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	c.Lifecycle = &v1.Lifecycle{
		PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo poststart-ran > /tmp/poststart"}}},
		PreStop:   &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo prestop >> /data/order"}}},
	}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hooks", Namespace: ns},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{c},
			Volumes: []v1.Volume{dataVol},
		},
	})
	waitPod(t, ns, pod.Name, "Ready", 60*time.Second, func(p *v1.Pod) bool { return condition(p, v1.PodReady) == v1.ConditionTrue })
	waitFor(t, "the postStart file in the log", 30*time.Second, func() (bool, string) {
		b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "c"}).DoRaw(context.Background())
		return err == nil && strings.Contains(string(b), "saw poststart-ran"), string(b)
	})

	took := deletePod(t, ns, pod.Name, time.Duration(grace+10)*time.Second)
	b, err := os.ReadFile(filepath.Join(dir, "order"))
	if err != nil {
		t.Fatalf("preStop left nothing: %v", err)
	}
	if got := string(b); got != "prestop\nterm\n" {
		t.Errorf("order of events in the container %q, want preStop, then SIGTERM", got)
	}
	t.Logf("deleted in %v (grace %ds)", took.Round(time.Millisecond), grace)
	if took > time.Duration(grace)*time.Second {
		t.Errorf("deletion took %v, beyond the %ds grace period", took, grace)
	}
}

// TestHookPreStopSleep: a preStop sleep holds the container's stop back by
// its seconds, within the grace period the deletion gives (cut short when
// that is shorter). A finalizer keeps the pod in the API server, so the
// terminated state vk-cri reports can be read and stays.
func TestHookPreStopSleep(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	const finalizer = "example.com/hold"
	hold := func(name string, grace int64, sleep int64) *v1.Pod {
		c := sleeper("c")
		c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: sleep}}}
		p := specPod(ns, name, c)
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Finalizers = []string{finalizer}
		createPod(t, p)
		t.Cleanup(func() {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			_, _ = client.CoreV1().Pods(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
		})
		waitRunning(t, ns, name)
		return p
	}
	full := hold("sleep-full", 30, 4)
	cut := hold("sleep-cut", 30, 30)
	deleted := map[string]time.Time{}
	for name, grace := range map[string]int64{full.Name: 30, cut.Name: 3} {
		deleted[name] = time.Now()
		if err := client.CoreV1().Pods(ns).Delete(context.Background(), name, *metav1.NewDeleteOptions(grace)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string][2]time.Duration{
		full.Name: {4 * time.Second, 20 * time.Second}, // the sleep, then a quick stop
		cut.Name:  {3 * time.Second, 15 * time.Second}, // the deletion's 3 s, not the sleep's 30
	} {
		p := waitPod(t, ns, name, name+" terminated", 90*time.Second, func(p *v1.Pod) bool {
			c := containerStatus(p, "c")
			return c != nil && c.State.Terminated != nil
		})
		took := containerStatus(p, "c").State.Terminated.FinishedAt.Sub(deleted[name])
		if took < want[0]-time.Second || took > want[1] {
			t.Errorf("%s: stopped %v after the delete, want %v to %v", name, took, want[0], want[1])
		}
		// The terminated state stays while the finalizer holds the pod.
		suite.Consistently(t, name+" still terminated", 3*time.Second, 200*time.Millisecond, func() (bool, string) {
			p := getPod(t, ns, name)
			c := containerStatus(p, "c")
			return c != nil && c.State.Terminated != nil, podSummary(p)
		})
	}
}

// TestTerminationMessageNonRoot: a container running as a non-root user
// writes its termination message to a path of its own choosing, and the
// pod's status reports it.
func TestTerminationMessageNonRoot(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	uid := int64(1000)
	c := busybox("c", `echo -n DONE > /dev/termination-custom-log`)
	c.TerminationMessagePath = "/dev/termination-custom-log"
	c.SecurityContext = &v1.SecurityContext{RunAsUser: &uid}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nonroot-message", Namespace: ns},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{c}},
	})
	p := waitPod(t, ns, pod.Name, "Succeeded or Failed", 60*time.Second, func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
	})
	term := containerStatus(p, "c").State.Terminated
	if p.Status.Phase != v1.PodSucceeded || term == nil || term.ExitCode != 0 || term.Message != "DONE" {
		t.Fatalf("phase %s, terminated %+v", p.Status.Phase, term)
	}
}

// TestHookFallbackToLogs: a failed container with no termination message
// and terminationMessagePolicy FallbackToLogsOnError reports the end of
// its log.
func TestHookFallbackToLogs(t *testing.T) {
	need(t)
	ns := namespace(t)
	c := busybox("c", `echo line one; echo the real reason; exit 2`)
	c.TerminationMessagePolicy = v1.TerminationMessageFallbackToLogsOnError
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "fallback", Namespace: ns},
		Spec:       v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{c}},
	})
	p := waitPod(t, ns, pod.Name, "Failed", 60*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	term := containerStatus(p, "c").State.Terminated
	if term == nil || term.ExitCode != 2 || term.Message != "line one\nthe real reason\n" {
		t.Fatalf("terminated %+v", term)
	}
}

// TestProbeWhileTerminating: a pod being deleted keeps its readiness probe,
// so a container that makes itself unready on SIGTERM is shown unready
// while it still runs; its liveness probe stops at once, so the file it
// removes too kills it no more.
func TestProbeWhileTerminating(t *testing.T) {
	need(t)
	ns := namespace(t)
	grace := int64(30)
	c := busybox("c", `trap 'rm -f /tmp/ready /tmp/alive; sleep 15; exit 0' TERM
touch /tmp/ready /tmp/alive
while true; do sleep 0.2; done`)
	c.ReadinessProbe = &v1.Probe{ProbeHandler: execAction("cat", "/tmp/ready"), PeriodSeconds: 1, FailureThreshold: 1}
	c.LivenessProbe = &v1.Probe{ProbeHandler: execAction("cat", "/tmp/alive"), PeriodSeconds: 1, FailureThreshold: 1}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "terminating", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{c}},
	})
	waitPod(t, ns, pod.Name, "pod Ready", 60*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionTrue
	})
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, ns, pod.Name, "pod unready while it terminates", 20*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionFalse
	})
	if p.DeletionTimestamp == nil || containerStatus(p, "c") == nil || containerStatus(p, "c").State.Running == nil {
		t.Fatalf("unready only once stopped: %s", podSummary(p))
	}
	// Until it has ended, the liveness probe never ran against the
	// removed file.
	waitFor(t, "pod gone", time.Minute, func() (bool, string) {
		_, err := client.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	if n := probeEvents(t, ns, pod.Name, "Unhealthy", "Liveness probe failed"); n != 0 {
		t.Errorf("%d liveness probe failures on a terminating pod", n)
	}
	if n := probeEvents(t, ns, pod.Name, "Killing", "Container c failed liveness probe"); n != 0 {
		t.Errorf("killed for its liveness probe while terminating")
	}
}
