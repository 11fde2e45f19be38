package vk_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	internalapi "k8s.io/cri-api/pkg/apis"
)

func TestNode(t *testing.T) {
	need(t)
	n, err := client.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"type": "virtual-kubelet",
		"kubernetes.io/os": "linux", "kubernetes.io/hostname": nodeName} {
		if got := n.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	// NodeRestriction refuses a node that sets its own role.
	if _, ok := n.Labels["kubernetes.io/role"]; ok {
		t.Errorf("labels %v: kubernetes.io/role is not the node's to set", n.Labels)
	}
	if n.Labels["kubernetes.io/arch"] == "" {
		t.Error("no kubernetes.io/arch label")
	}
	foundTaint := false
	for _, tt := range n.Spec.Taints {
		if tt.Key == "virtual-kubelet.io/provider" && tt.Value == "cri-compose" && tt.Effect == v1.TaintEffectNoSchedule {
			foundTaint = true
		}
	}
	if !foundTaint {
		t.Errorf("taints %v lack virtual-kubelet.io/provider=cri-compose:NoSchedule", n.Spec.Taints)
	}
	info := n.Status.NodeInfo
	if !strings.HasPrefix(info.ContainerRuntimeVersion, "cri-compose://") {
		t.Errorf("containerRuntimeVersion = %q, want cri-compose://…", info.ContainerRuntimeVersion)
	}
	if info.OperatingSystem != "linux" || info.Architecture == "" || info.KernelVersion == "" {
		t.Errorf("node info %+v", info)
	}
	if n.Status.Capacity.Cpu().IsZero() || n.Status.Capacity.Memory().IsZero() || n.Status.Capacity.Pods().Value() != 20 {
		t.Errorf("capacity %v", n.Status.Capacity)
	}
	ip := ""
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			ip = a.Address
		}
	}
	if ip != "127.0.0.1" {
		t.Errorf("InternalIP = %q, want 127.0.0.1 (--node-ip)", ip)
	}
	if p := n.Status.DaemonEndpoints.KubeletEndpoint.Port; fmt.Sprint(p) != kubeletAddr[strings.LastIndex(kubeletAddr, ":")+1:] {
		t.Errorf("kubelet endpoint port %d, want that of %s", p, kubeletAddr)
	}
	t.Logf("node %s: %s, %s cpu, %s memory, runtime %s", n.Name, info.OSImage, n.Status.Capacity.Cpu(), n.Status.Capacity.Memory(), info.ContainerRuntimeVersion)
}

// TestPod runs the pod flow on the cri-compose node.
func TestPod(t *testing.T) {
	need(t)
	podFlow(t, vkNode{name: nodeName, runtime: "cri-compose", cri: cri})
}

// vkNode is a virtual node of the suite: its name, and the CRI runtime its
// vk-cri speaks to (with that runtime's name, which prefixes container ids).
type vkNode struct {
	name, runtime string
	cri           internalapi.RuntimeService
}

// podFlow runs a pod with an init container, two containers, configMap,
// secret, downwardAPI and emptyDir volumes and env from all sorts on node n,
// and reads it back through the API server: status, logs (through the
// kubelet API), exec; then deletes it. Nothing in it depends on the runtime.
func podFlow(t *testing.T, n vkNode) {
	ns := namespace(t)
	ctx := context.Background()
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data:       map[string]string{"greeting": "hello from configmap", "file.txt": "cm-file"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data:       map[string][]byte{"password": []byte("s3cret"), "token": []byte("tok")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grace := int64(10)
	mode := int32(0o400)
	main := busybox("main", `echo "greeting=$GREETING password=$PASSWORD pod=$POD_NAME ip=$POD_IP node=$NODE_NAME cm=$CM_greeting"
cat /etc/cfg/file.txt; echo; cat /etc/sec/key; echo; cat /work/init.txt; cat /etc/podinfo/labels; echo
stat -c 'mode=%a' /etc/sec/..data/key
trap 'echo bye; exit 0' TERM
while true; do sleep 1; done`)
	main.Env = []v1.EnvVar{
		{Name: "GREETING", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "greeting"}}},
		{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "password"}}},
		{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "NODE_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
	}
	main.EnvFrom = []v1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}
	main.VolumeMounts = []v1.VolumeMount{
		{Name: "cfg", MountPath: "/etc/cfg"}, {Name: "sec", MountPath: "/etc/sec"},
		{Name: "work", MountPath: "/work"}, {Name: "podinfo", MountPath: "/etc/podinfo"},
	}
	sidecar := busybox("sidecar", `trap 'exit 0' TERM; i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done`)
	// Probes (probes.go): Ready waits for main's readiness probe, which
	// needs what the init container wrote; the sidecar's liveness probe
	// must not restart it.
	main.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"cat", "/work/init.txt"}}}, PeriodSeconds: 1}
	sidecar.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}
	init := busybox("init", `echo init-ran > /work/init.txt`)
	init.VolumeMounts = []v1.VolumeMount{{Name: "work", MountPath: "/work"}}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{"app": "vk-e2e"}},
		Spec: v1.PodSpec{
			NodeName:                      n.name,
			TerminationGracePeriodSeconds: &grace,
			InitContainers:                []v1.Container{init},
			Containers:                    []v1.Container{main, sidecar},
			Volumes: []v1.Volume{
				{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
					LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
				{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
					SecretName: "sec", Items: []v1.KeyToPath{{Key: "token", Path: "key", Mode: &mode}}}}},
				{Name: "work", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
					Items: []v1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
			},
		},
	})
	start := time.Now()
	var p *v1.Pod
	waitFor(t, "pod Running and Ready", 90*time.Second, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue && p.Status.PodIP != "", podSummary(p)
	})
	t.Logf("Running and Ready in %v: %s", time.Since(start).Round(time.Millisecond), podSummary(p))
	for _, c := range []v1.PodConditionType{v1.PodScheduled, v1.PodInitialized, v1.ContainersReady, v1.PodReady, v1.PodReadyToStartContainers} {
		if s := condition(p, c); s != v1.ConditionTrue {
			t.Errorf("condition %s = %q", c, s)
		}
	}
	if ic := containerStatus(p, "init"); ic == nil || ic.State.Terminated == nil || ic.State.Terminated.ExitCode != 0 || ic.State.Terminated.Reason != "Completed" {
		t.Errorf("init container status %+v", ic)
	}
	for _, name := range []string{"main", "sidecar"} {
		cs := containerStatus(p, name)
		if cs == nil || !cs.Ready || cs.State.Running == nil || !strings.HasPrefix(cs.ContainerID, n.runtime+"://") || cs.ImageID == "" || cs.Started == nil || !*cs.Started {
			t.Errorf("container %s status %+v", name, cs)
		}
	}
	if p.Status.HostIP != "127.0.0.1" || p.Status.StartTime == nil {
		t.Errorf("hostIP %q startTime %v", p.Status.HostIP, p.Status.StartTime)
	}

	// Logs, through the API server and the kubelet API.
	want := []string{
		fmt.Sprintf("greeting=hello from configmap password=s3cret pod=web ip=%s node=%s cm=hello from configmap", p.Status.PodIP, n.name),
		"cm-file", "tok", "init-ran", `app="vk-e2e"`, "mode=400",
	}
	var logs string
	waitFor(t, "main's log", 20*time.Second, func() (bool, string) {
		b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		logs = string(b)
		for _, w := range want {
			if !strings.Contains(logs, w) {
				return false, fmt.Sprintf("no %q in\n%s", w, logs)
			}
		}
		return true, ""
	})
	t.Logf("kubectl logs web -c main:\n%s", logs)
	tailLines := int64(2)
	waitFor(t, "logs --tail=2 --timestamps", 10*time.Second, func() (bool, string) {
		b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "sidecar", TailLines: &tailLines, Timestamps: true}).DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 {
			return false, fmt.Sprintf("%q", b)
		}
		_, err = time.Parse(time.RFC3339Nano, strings.Fields(lines[1])[0])
		return err == nil && strings.Contains(lines[1], " tick "), fmt.Sprintf("%q (%v)", b, err)
	})
	// -f streams new lines.
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	stream, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "sidecar", Follow: true, TailLines: &tailLines}).Stream(fctx)
	if err != nil {
		t.Fatalf("logs -f: %v", err)
	}
	sc := bufio.NewScanner(stream)
	var got []string
	for len(got) < 6 && sc.Scan() {
		got = append(got, sc.Text())
	}
	stream.Close()
	if len(got) < 6 {
		t.Errorf("logs -f gave %d lines before it stopped (%v): %q", len(got), sc.Err(), got)
	}
	// --since=2s: only the last two seconds' lines, each stamped within
	// them, once the sidecar has ticked for longer than that.
	waitFor(t, "the sidecar's 15th tick", 30*time.Second, func() (bool, string) {
		b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "sidecar"}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), "tick 15\n"), fmt.Sprintf("%q %v", b, err)
	})
	since := int64(2)
	asked := time.Now()
	b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "sidecar", SinceSeconds: &since, Timestamps: true}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs --since: %v", err)
	}
	recent := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range recent {
		ts, err := time.Parse(time.RFC3339Nano, strings.Fields(l)[0])
		// A second of slack for the two clocks' reading of "now".
		if err != nil || ts.Before(asked.Add(-time.Duration(since)*time.Second-time.Second)) {
			t.Errorf("logs --since=2s gave %q (%v)", l, err)
		}
	}
	if len(recent) == 0 || len(recent) > 12 || strings.Contains(string(b), " tick 1\n") {
		t.Errorf("logs --since=2s gave %d lines, want the ticks of 2 s (one every 0.3 s)", len(recent))
	}
	// --limit-bytes.
	limit := int64(10)
	if b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "sidecar", LimitBytes: &limit}).DoRaw(ctx); err != nil || len(b) != 10 || !strings.HasPrefix(string(b), "tick 1\n") {
		t.Errorf("logs --limit-bytes=10: %q (%v)", b, err)
	}

	// Exec, through the API server, the kubelet API and the runtime's
	// streaming server.
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod.Name).SubResource("exec").
		VersionedParams(&v1.PodExecOptions{Container: "main", Command: []string{"sh", "-c", "cat /etc/sec/key; echo; echo $PASSWORD >&2"},
			Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(restConfig, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
	err = exec.StreamWithContext(ectx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	ecancel()
	if err != nil || strings.TrimSpace(stdout.String()) != "tok" || strings.TrimSpace(stderr.String()) != "s3cret" {
		t.Errorf("exec: err %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}

	// Delete: gone from the API and the runtime within the grace period.
	start = time.Now()
	if err := client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod deleted", time.Duration(grace+5)*time.Second, func() (bool, string) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, podSummary(p)
	})
	took := time.Since(start)
	waitFor(t, "no sandbox left", 5*time.Second, func() (bool, string) {
		sbs := sandboxesOf(t, n.cri, string(pod.UID))
		return len(sbs) == 0, fmt.Sprintf("%d sandboxes", len(sbs))
	})
	t.Logf("deleted in %v (grace %ds); no sandbox left", took.Round(time.Millisecond), grace)
	if took > time.Duration(grace)*time.Second {
		t.Errorf("deletion took %v, longer than the grace period", took)
	}
}

// TestCrashLoop checks that a crashing container is restarted with
// back-off, and that its previous run's log can be read.
func TestCrashLoop(t *testing.T) {
	need(t)
	ns := namespace(t)
	zero := int64(0)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crash", Namespace: ns},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []v1.Container{busybox("c", `echo run at $(date +%s); exit 3`)},
		},
	})
	sawBackOff := false
	var p *v1.Pod
	start := time.Now()
	waitFor(t, "restartCount ≥ 2", 60*time.Second, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		cs := containerStatus(p, "c")
		if cs == nil {
			return false, podSummary(p)
		}
		if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
			sawBackOff = true
		}
		return cs.RestartCount >= 2, podSummary(p)
	})
	t.Logf("restartCount 2 after %v: %s", time.Since(start).Round(time.Millisecond), podSummary(p))
	cs := containerStatus(p, "c")
	if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 3 || lt.Reason != "Error" {
		t.Errorf("lastState %+v", cs.LastTerminationState)
	}
	if !sawBackOff {
		t.Error("never saw CrashLoopBackOff")
	}
	if p.Status.Phase != v1.PodRunning {
		t.Errorf("phase %s, want Running (restartPolicy Always)", p.Status.Phase)
	}
	// The back-off doubles: 10 s before the second restart, so two
	// restarts take at least that long.
	if el := time.Since(start); el < 9*time.Second {
		t.Errorf("2 restarts in %v: no back-off", el)
	}
	b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "c", Previous: true}).DoRaw(context.Background())
	if err != nil || !strings.Contains(string(b), "run at ") {
		t.Errorf("logs --previous: %q, %v", b, err)
	}
}

// TestPodSucceeded checks restartPolicy Never: the pod ends Succeeded and
// its sandbox stops.
func TestPodSucceeded(t *testing.T) {
	need(t)
	ns := namespace(t)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: ns},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyNever,
			Containers:    []v1.Container{busybox("c", `echo done`)},
		},
	})
	var p *v1.Pod
	waitFor(t, "pod Succeeded", 60*time.Second, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodSucceeded, podSummary(p)
	})
	cs := containerStatus(p, "c")
	if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.RestartCount != 0 {
		t.Errorf("container status %+v", cs)
	}
	if condition(p, v1.PodReady) != v1.ConditionFalse {
		t.Errorf("Ready = %s for a Succeeded pod", condition(p, v1.PodReady))
	}
	waitFor(t, "sandbox stopped", 20*time.Second, func() (bool, string) {
		sbs := sandboxes(t, string(pod.UID))
		return len(sbs) == 1 && sbs[0].State.String() == "SANDBOX_NOTREADY", fmt.Sprint(sbs)
	})
}

// TestRestartAdopts restarts vk-cri under a running pod: the new process
// takes the pod's sandbox and containers over instead of starting them
// again.
func TestRestartAdopts(t *testing.T) {
	need(t)
	ns := namespace(t)
	zero := int64(0)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "steady", Namespace: ns},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []v1.Container{busybox("c", `while true; do sleep 1; done`)},
		},
	})
	var before *v1.Pod
	waitFor(t, "pod Ready", 60*time.Second, func() (bool, string) {
		before = getPod(t, ns, pod.Name)
		return condition(before, v1.PodReady) == v1.ConditionTrue, podSummary(before)
	})
	sbs := sandboxes(t, string(pod.UID))
	if err := restartVK(); err != nil {
		t.Fatal(err)
	}
	// The new process has reported on the pod once its pod worker ran.
	waitFor(t, "vk-cri back", 60*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(vkLog)
		return bytes.Contains(b, []byte("Node registered")) && bytes.Contains(b, []byte(`"Pod added" pod="`+ns+`/steady"`)), tail(vkLog, 5)
	})
	time.Sleep(3 * time.Second) // time enough to (wrongly) restart anything
	after := getPod(t, ns, pod.Name)
	b, a := containerStatus(before, "c"), containerStatus(after, "c")
	if a.ContainerID != b.ContainerID || a.RestartCount != 0 || a.State.Running == nil || condition(after, v1.PodReady) != v1.ConditionTrue {
		t.Errorf("after the restart: %s (before: %s)", podSummary(after), podSummary(before))
	}
	if sbs2 := sandboxes(t, string(pod.UID)); len(sbs2) != 1 || sbs2[0].Id != sbs[0].Id {
		t.Errorf("sandboxes before %v, after %v", sbs, sbs2)
	}
	if !after.Status.StartTime.Equal(before.Status.StartTime) {
		t.Errorf("startTime moved: %v → %v", before.Status.StartTime, after.Status.StartTime)
	}
}

// TestCRIRestart restarts cri-compose under a running pod: vk-cri reconnects
// (its probes run again through the new process), restarts nothing, and
// its event stream is back: a container that exits afterwards is seen and
// restarted well before the periodic resync (30 s) would notice.
func TestCRIRestart(t *testing.T) {
	need(t)
	ns := namespace(t)
	zero := int64(0)
	c := busybox("c", `while [ ! -e /tmp/exit ]; do sleep 0.2; done; exit 3`)
	c.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "through", Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &zero, Containers: []v1.Container{c}},
	})
	before := waitPod(t, ns, pod.Name, "pod Ready", 60*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionTrue
	})
	sbs := sandboxes(t, string(pod.UID))
	probes := func() float64 {
		m, ok := sample(scrape(t, "/metrics"), "vkcri_probe_results_total", map[string]string{"probe_type": "readiness", "result": "success"})
		if !ok {
			return 0
		}
		return value(m)
	}

	if err := restartCRI(); err != nil {
		t.Fatal(err)
	}
	atRestart := probes()
	waitFor(t, "readiness probes through the new cri-compose", 60*time.Second, func() (bool, string) {
		n := probes()
		return n >= atRestart+3, fmt.Sprintf("%v successes, %v at the restart", n, atRestart)
	})
	// Probes that timed out while the runtime was away may have made the
	// pod unready for a moment, as with kubelet; it must be Ready again
	// with the same container.
	after := waitPod(t, ns, pod.Name, "pod Ready after the restart", 30*time.Second, func(p *v1.Pod) bool {
		return condition(p, v1.PodReady) == v1.ConditionTrue
	})
	b, a := containerStatus(before, "c"), containerStatus(after, "c")
	if a.ContainerID != b.ContainerID || a.RestartCount != 0 || a.State.Running == nil {
		t.Fatalf("after cri-compose's restart: %s (before: %s)", podSummary(after), podSummary(before))
	}
	if n := probeEvents(t, ns, pod.Name, "Unhealthy", "Readiness probe failed"); n > 0 {
		t.Logf("%d readiness probe failures while cri-compose restarted", n)
	}
	if sbs2 := sandboxes(t, string(pod.UID)); len(sbs2) != 1 || sbs2[0].Id != sbs[0].Id {
		t.Fatalf("sandboxes before %v, after %v", sbs, sbs2)
	}

	start := time.Now()
	_ = execIn(t, after, "c", "touch", "/tmp/exit")
	p := waitPod(t, ns, pod.Name, "the exit seen and the container restarted", 20*time.Second, func(p *v1.Pod) bool {
		cs := containerStatus(p, "c")
		return cs.RestartCount >= 1 && cs.LastTerminationState.Terminated != nil
	})
	if lt := containerStatus(p, "c").LastTerminationState.Terminated; lt.ExitCode != 3 || lt.ContainerID != b.ContainerID {
		t.Errorf("lastState %+v, want exit 3 of %s", lt, b.ContainerID)
	}
	t.Logf("exit seen and restarted %v after it was asked for", time.Since(start).Round(time.Millisecond))
}
