package vk_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Pod spec fields vk-cri resolves as kubelet does, end to end against the
// real API server and cri-compose: runAsNonRoot, RuntimeClass,
// subPathExpr, fileKeyRef env, the managed /etc/hosts, container-level
// restart policies and rules, and readiness gates.

// sleeper is a busybox container that runs until told to stop.
func sleeper(name string) v1.Container {
	return busybox(name, `trap 'exit 0' TERM; while true; do sleep 1; done`)
}

// specPod is a pod of the containers with a short grace period.
func specPod(ns, name string, cs ...v1.Container) *v1.Pod {
	grace := int64(1)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: cs},
	}
}

// waitWaiting waits until the pod's container waits with reason and a
// message holding msg, and returns the pod.
func waitWaiting(t *testing.T, ns, name, container, reason, msg string) *v1.Pod {
	t.Helper()
	var p *v1.Pod
	waitFor(t, fmt.Sprintf("%s/%s waiting with %s", name, container, reason), 90*time.Second, func() (bool, string) {
		p = getPod(t, ns, name)
		cs := containerStatus(p, container)
		ok := cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == reason && strings.Contains(cs.State.Waiting.Message, msg)
		return ok, podSummary(p)
	})
	return p
}

// waitEvent waits for an event of the pod with reason and a message
// holding msg.
func waitEvent(t *testing.T, ns, pod, reason, msg string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a %s event of %s", reason, pod), 60*time.Second, func() (bool, string) {
		evs, err := client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Message, msg) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
	})
}

// TestSpecRunAsNonRoot: a container that must run as non-root is refused
// (CreateContainerConfigError, kubelet's message) when its runAsUser is 0
// or, without one, when its image runs as root (the test image has no
// USER); with runAsUser 1000 it runs as 1000.
func TestSpecRunAsNonRoot(t *testing.T) {
	need(t)
	ns := namespace(t)
	yes := true
	root, user := int64(0), int64(1000)

	p0 := specPod(ns, "uid0", sleeper("main"))
	p0.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: &yes}
	p0.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsUser: &root}
	p0 = createPod(t, p0)

	byImage := specPod(ns, "image-root", sleeper("main"))
	byImage.Spec.Containers[0].SecurityContext = &v1.SecurityContext{RunAsNonRoot: &yes}
	byImage = createPod(t, byImage)

	ok := specPod(ns, "uid1000", sleeper("main"))
	ok.Spec.SecurityContext = &v1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &user}
	ok = createPod(t, ok)

	p := waitRunning(t, ns, ok.Name)
	if got := strings.TrimSpace(execIn(t, p, "main", "id", "-u")); got != "1000" {
		t.Errorf("uid1000 runs as %q", got)
	}
	waitWaiting(t, ns, p0.Name, "main", "CreateContainerConfigError",
		fmt.Sprintf(`container's runAsUser breaks non-root policy (pod: "%s_%s(%s)", container: main)`, p0.Name, ns, p0.UID))
	waitEvent(t, ns, p0.Name, "Failed", "Error: container's runAsUser breaks non-root policy")
	waitWaiting(t, ns, byImage.Name, "main", "CreateContainerConfigError",
		fmt.Sprintf(`container has runAsNonRoot and image will run as root (pod: "%s_%s(%s)", container: main)`, byImage.Name, ns, byImage.UID))
	for _, name := range []string{p0.Name, byImage.Name} {
		// The sandbox runs; only the container is refused.
		if p := getPod(t, ns, name); containerStatus(p, "main").ContainerID != "" || len(sandboxes(t, string(p.UID))) != 1 {
			t.Errorf("%s: %s, %d sandboxes", name, podSummary(p), len(sandboxes(t, string(p.UID))))
		}
	}
}

// TestSpecRuntimeClass: the sandbox gets the handler of the pod's
// RuntimeClass: "runc" runs, a handler cri-compose does not know leaves
// the pod without a sandbox (ContainerCreating, FailedCreatePodSandBox),
// and a pod whose RuntimeClass is missing waits until it exists.
func TestSpecRuntimeClass(t *testing.T) {
	need(t)
	ns := namespace(t)
	ctx := context.Background()
	rcs := client.NodeV1().RuntimeClasses()
	newClass := func(name, handler string) string {
		t.Helper()
		name = name + "-" + runID
		_, err := rcs.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create RuntimeClass %s: %v", name, err)
		}
		t.Cleanup(func() { _ = rcs.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		return name
	}
	runc, kata := newClass("e2e-runc", "runc"), newClass("e2e-kata", "kata")

	good := specPod(ns, "runc", sleeper("main"))
	good.Spec.RuntimeClassName = &runc
	good = createPod(t, good)
	unknown := specPod(ns, "kata", sleeper("main"))
	unknown.Spec.RuntimeClassName = &kata
	unknown = createPod(t, unknown)

	waitRunning(t, ns, good.Name)
	if sbs := sandboxes(t, string(good.UID)); len(sbs) != 1 {
		t.Errorf("runc: %d sandboxes", len(sbs))
	}
	waitWaiting(t, ns, unknown.Name, "main", "ContainerCreating", `runtime handler "kata" is not supported`)
	waitEvent(t, ns, unknown.Name, "FailedCreatePodSandBox", `Failed to create pod sandbox: `)
	if sbs := sandboxes(t, string(unknown.UID)); len(sbs) != 0 {
		t.Errorf("kata: %d sandboxes", len(sbs))
	}

	// A missing class: the API server's RuntimeClass admission refuses to
	// create such a pod, so the class goes between the pod's creation and
	// its binding to the node.
	late := newClass("e2e-late", "runc")
	missing := specPod(ns, "late", sleeper("main"))
	missing.Spec.RuntimeClassName = &late
	missing, err := client.CoreV1().Pods(ns).Create(ctx, missing, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcs.Delete(ctx, late, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = client.CoreV1().Pods(ns).Bind(ctx, &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: missing.Name, Namespace: ns},
		Target: v1.ObjectReference{Kind: "Node", Name: nodeName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("bind %s: %v", missing.Name, err)
	}
	waitWaiting(t, ns, missing.Name, "main", "ContainerCreating", fmt.Sprintf(`runtimeclass.node.k8s.io %q not found`, late))
	waitEvent(t, ns, missing.Name, "FailedCreatePodSandBox", fmt.Sprintf(`Failed to create pod sandbox: runtimeclass.node.k8s.io %q not found`, late))
	if sbs := sandboxes(t, string(missing.UID)); len(sbs) != 0 {
		t.Errorf("late: %d sandboxes without its class", len(sbs))
	}
	if _, err := rcs.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: late}, Handler: "runc"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, ns, missing.Name) // at the next retry (back-off)
}

// TestSpecSubPathExpr: a volumeMount's subPathExpr $(POD_NAME) (from the
// downward API) mounts the pod's own folder of the volume.
func TestSpecSubPathExpr(t *testing.T) {
	need(t)
	ns := namespace(t)
	main := sleeper("main")
	main.Env = []v1.EnvVar{{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	main.VolumeMounts = []v1.VolumeMount{
		{Name: "logs", MountPath: "/all"},
		{Name: "logs", MountPath: "/mine", SubPathExpr: "pods/$(POD_NAME)"},
	}
	pod := specPod(ns, "subpath-expr", main)
	pod.Spec.Volumes = []v1.Volume{{Name: "logs", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod = createPod(t, pod)
	p := waitRunning(t, ns, pod.Name)
	execIn(t, p, "main", "sh", "-c", "echo hello > /mine/f")
	if got := execIn(t, p, "main", "cat", "/all/pods/subpath-expr/f"); got != "hello\n" {
		t.Errorf("/all/pods/subpath-expr/f = %q", got)
	}
}

// TestSpecSubPathFSGroup: a missing subPath of an emptyDir, in a pod with
// fsGroup, is made with the volume's mode (group-writable, setgid, sticky
// on tmpfs) and its group, so a non-root user of the group writes there,
// and what it writes belongs to the group; as kubelet's.
func TestSpecSubPathFSGroup(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	uid, fsGroup := int64(1001), int64(123)
	main := sleeper("main")
	main.VolumeMounts = []v1.VolumeMount{{Name: "v", MountPath: "/all"}, {Name: "v", MountPath: "/sub", SubPath: "a/b"}}
	pod := specPod(ns, "subpath-fsgroup", main)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{RunAsUser: &uid, FSGroup: &fsGroup}
	pod.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}}}
	p := waitRunning(t, ns, createPod(t, pod).Name)
	stat := func(path string) string {
		return strings.TrimSpace(execIn(t, p, "main", "stat", "-c", "%A %u %g", path))
	}
	root := stat("/all")
	for _, d := range []string{"/all/a", "/all/a/b"} {
		if got := stat(d); !strings.HasPrefix(got, strings.Fields(root)[0]+" 0 123") {
			t.Errorf("%s: %q, want the volume's mode (%q), owner 0 and group 123", d, got, root)
		}
	}
	execIn(t, p, "main", "sh", "-c", "echo hello > /sub/f")
	if got := stat("/all/a/b/f"); !strings.HasSuffix(got, " 1001 123") {
		t.Errorf("a file written in the subPath: %q, want owner 1001 and group 123", got)
	}
}

// TestSpecFileKeyRef: env from a file an init container wrote into an
// emptyDir (kubelet's KEY='value' format); an optional key that is not
// there leaves its variable unset.
func TestSpecFileKeyRef(t *testing.T) {
	need(t)
	ns := namespace(t)
	yes := true
	ref := func(key string, optional *bool) *v1.EnvVarSource {
		return &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "config", Path: "app/app.env", Key: key, Optional: optional}}
	}
	init := busybox("write", `mkdir -p /config/app && printf "%s\n" "# by the init container" "GREETING='hello from init'" "MULTI='two"  "lines'" > /config/app/app.env`)
	init.VolumeMounts = []v1.VolumeMount{{Name: "config", MountPath: "/config"}}
	main := sleeper("main")
	main.Env = []v1.EnvVar{
		{Name: "GREETING", ValueFrom: ref("GREETING", nil)},
		{Name: "MULTI", ValueFrom: ref("MULTI", nil)},
		{Name: "OPT", ValueFrom: ref("NOT_THERE", &yes)},
	}
	pod := specPod(ns, "file-key-ref", main)
	pod.Spec.InitContainers = []v1.Container{init}
	pod.Spec.Volumes = []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod = createPod(t, pod)
	p := waitRunning(t, ns, pod.Name)
	got := execIn(t, p, "main", "sh", "-c", `echo "$GREETING|$MULTI|${OPT-unset}"`)
	if want := "hello from init|two\nlines|unset\n"; got != want {
		t.Errorf("env: %q, want %q", got, want)
	}
}

// TestSpecEtcHosts: every container gets the node-managed /etc/hosts, with
// the pod's FQDN (hostname.subdomain) and its hostAliases, unless it
// mounts something at /etc/hosts itself; a host-network pod gets the
// node's hosts file and its aliases.
func TestSpecEtcHosts(t *testing.T) {
	need(t)
	ns := namespace(t)
	own := sleeper("own")
	own.VolumeMounts = []v1.VolumeMount{{Name: "hosts", MountPath: "/etc/hosts", SubPath: "hosts"}}
	pod := specPod(ns, "etc-hosts", sleeper("main"), own)
	pod.Spec.Hostname, pod.Spec.Subdomain = "h", "sub"
	pod.Spec.HostAliases = []v1.HostAlias{{IP: "123.45.67.89", Hostnames: []string{"foo.example", "bar"}}}
	init := busybox("write", `echo "10.9.8.7 mine" > /v/hosts`)
	init.VolumeMounts = []v1.VolumeMount{{Name: "hosts", MountPath: "/v"}}
	pod.Spec.InitContainers = []v1.Container{init}
	pod.Spec.Volumes = []v1.Volume{{Name: "hosts", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	pod = createPod(t, pod)
	p := waitRunning(t, ns, pod.Name)
	hosts := execIn(t, p, "main", "cat", "/etc/hosts")
	for _, want := range []string{"# Kubernetes-managed hosts file.\n",
		p.Status.PodIP + "\th.sub." + ns + ".svc.cluster.local\th\n",
		"# Entries added by HostAliases.\n123.45.67.89\tfoo.example\tbar\n"} {
		if !strings.Contains(hosts, want) {
			t.Errorf("/etc/hosts of main lacks %q:\n%s", want, hosts)
		}
	}
	if got := execIn(t, p, "own", "cat", "/etc/hosts"); got != "10.9.8.7 mine\n" {
		t.Errorf("/etc/hosts of the container that mounts its own: %q", got)
	}

	hn := specPod(ns, "etc-hosts-hostnet", sleeper("main"))
	hn.Spec.HostNetwork = true
	hn.Spec.HostAliases = pod.Spec.HostAliases
	hn = createPod(t, hn)
	p = waitRunning(t, ns, hn.Name)
	node, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Kubernetes-managed hosts file (host network).\n" + string(node) +
		"\n# Entries added by HostAliases.\n123.45.67.89\tfoo.example\tbar\n"
	if got := execIn(t, p, "main", "cat", "/etc/hosts"); got != want {
		t.Errorf("/etc/hosts of the host-network pod:\n%s\nwant:\n%s", got, want)
	}
}

// TestSpecContainerRestartRules: a container's own restartPolicy and
// restartPolicyRules decide whether it runs again, over the pod's. Under a
// pod's Never, container "rules" (Never, restarted on exit code 42) exits
// 42 and is restarted, then exits 1 and stays down; container "always"
// (Always) comes back after a clean exit. Under a pod's Always, container
// "never" (Never) stays down, and the pod ends Failed once it does.
func TestSpecContainerRestartRules(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	always, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyNever
	// /tmp survives a restart only on a volume.
	tmp := []v1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	rules := busybox("rules", `if [ -e /tmp/ran ]; then exit 1; fi; touch /tmp/ran; exit 42`)
	rules.RestartPolicy, rules.VolumeMounts = &never, tmp
	rules.RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	again := busybox("always", `if [ -e /tmp/again ]; then exec sleep 3600; fi; touch /tmp/again; exit 0`)
	again.RestartPolicy, again.VolumeMounts = &always, tmp
	p1 := specPod(ns, "pod-never", rules, again)
	p1.Spec.RestartPolicy = v1.RestartPolicyNever
	p1.Spec.Volumes = []v1.Volume{{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	createPod(t, p1)

	down := busybox("never", `exit 3`)
	down.RestartPolicy = &never
	p2 := specPod(ns, "pod-always", down)
	p2.Spec.RestartPolicy = v1.RestartPolicyAlways
	createPod(t, p2)

	p := waitPod(t, ns, p1.Name, "rules restarted once and down, always running again", 2*time.Minute, func(p *v1.Pod) bool {
		r, a := containerStatus(p, "rules"), containerStatus(p, "always")
		return r != nil && r.RestartCount == 1 && r.State.Terminated != nil && a != nil && a.RestartCount == 1 && a.State.Running != nil
	})
	if r := containerStatus(p, "rules"); r.State.Terminated.ExitCode != 1 || r.LastTerminationState.Terminated == nil || r.LastTerminationState.Terminated.ExitCode != 42 {
		t.Errorf("rules: %s", podSummary(p))
	}
	if p.Status.Phase != v1.PodRunning {
		t.Errorf("pod-never with a container to run again: phase %s, want Running", p.Status.Phase)
	}

	p = waitPod(t, ns, p2.Name, "pod-always Failed", time.Minute, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if c := containerStatus(p, "never"); c == nil || c.RestartCount != 0 || c.State.Terminated == nil || c.State.Terminated.ExitCode != 3 {
		t.Errorf("never under a pod's Always: %s", podSummary(p))
	}
	// The first pod's "rules" stays down: its restart count holds.
	p = getPod(t, ns, p1.Name)
	if r := containerStatus(p, "rules"); r.RestartCount != 1 {
		t.Errorf("rules restarted again: %s", podSummary(p))
	}
}

// TestSpecReadinessGates: a pod with two readiness gates is Ready only
// while a controller has set both their conditions True on its status,
// and vk-cri's own status updates keep those conditions.
func TestSpecReadinessGates(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	const one, two = "example.com/one", "example.com/two"
	pod := specPod(ns, "gated", sleeper("c"))
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: one}, {ConditionType: two}}
	createPod(t, pod)
	setGate := func(gate string, status v1.ConditionStatus) {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q}]}}`, gate, status)
		if _, err := client.CoreV1().Pods(ns).Patch(context.Background(), pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("patch %s: %v", gate, err)
		}
	}
	readyCond := func(p *v1.Pod) v1.PodCondition {
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady {
				return c
			}
		}
		return v1.PodCondition{}
	}
	notReadyFor := func(gate string) func(p *v1.Pod) bool {
		return func(p *v1.Pod) bool {
			r := readyCond(p)
			return r.Status == v1.ConditionFalse && r.Reason == "ReadinessGatesNotReady" && strings.Contains(r.Message, fmt.Sprintf("%q", gate))
		}
	}
	// Running with its container ready, the pod waits for the last gate
	// in the spec; once that one is True, for the other.
	waitPod(t, ns, pod.Name, "running, not Ready for "+two, time.Minute, func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && ready(p, "c") && notReadyFor(two)(p)
	})
	setGate(two, v1.ConditionTrue)
	waitPod(t, ns, pod.Name, "not Ready for "+one, 30*time.Second, notReadyFor(one))
	setGate(one, v1.ConditionTrue)
	p := waitPod(t, ns, pod.Name, "Ready with both gates", 30*time.Second, func(p *v1.Pod) bool {
		return readyCond(p).Status == v1.ConditionTrue
	})
	for _, gate := range []string{one, two} {
		if !slices.ContainsFunc(p.Status.Conditions, func(c v1.PodCondition) bool { return string(c.Type) == gate && c.Status == v1.ConditionTrue }) {
			t.Errorf("condition %s lost from the status: %+v", gate, p.Status.Conditions)
		}
	}
	setGate(one, v1.ConditionFalse)
	waitPod(t, ns, pod.Name, "not Ready again for "+one, 30*time.Second, notReadyFor(one))
}

// TestSpecActiveDeadline: a pod whose activeDeadlineSeconds an update
// shortens is Failed with DeadlineExceeded once it has run that long, and
// its container is stopped, as kubelet does.
func TestSpecActiveDeadline(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	long := int64(3600)
	pod := specPod(ns, "deadline", sleeper("c"))
	pod.Spec.ActiveDeadlineSeconds = &long
	createPod(t, pod)
	p := waitRunning(t, ns, pod.Name)
	short := int64(3)
	p.Spec.ActiveDeadlineSeconds = &short
	if _, err := client.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = waitPod(t, ns, pod.Name, "Failed with DeadlineExceeded", time.Minute, func(p *v1.Pod) bool {
		c := containerStatus(p, "c")
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == "DeadlineExceeded" && c != nil && c.State.Terminated != nil
	})
	if n := probeEvents(t, ns, pod.Name, "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"); n == 0 {
		t.Errorf("no DeadlineExceeded event: %s", podSummary(p))
	}
}

// TestSpecInitFailsRestartAlways: an init container that fails on a
// RestartAlways pod is restarted, and every status the API server sees
// meanwhile reads as kubelet's: the next init container and the app
// containers waiting PodInitializing, the pod Pending and not Initialized.
func TestSpecInitFailsRestartAlways(t *testing.T) {
	need(t)
	ns := namespace(t)
	pod := specPod(ns, "init-fails", sleeper("run1"))
	pod.Spec.InitContainers = []v1.Container{busybox("init1", "exit 1"), busybox("init2", "true")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watch, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	createPod(t, pod)
	waiting := func(cs v1.ContainerStatus) error {
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "PodInitializing" {
			return fmt.Errorf("%s not waiting PodInitializing: %+v", cs.Name, cs.State)
		}
		return nil
	}
	var last *v1.Pod
	for ev := range watch.ResultChan() {
		p, ok := ev.Object.(*v1.Pod)
		if !ok {
			t.Fatalf("watch: %v", ev.Object)
		}
		last = p
		for _, cs := range p.Status.ContainerStatuses {
			if err := waiting(cs); err != nil {
				t.Fatal(err)
			}
		}
		if len(p.Status.InitContainerStatuses) != 2 {
			continue
		}
		if err := waiting(p.Status.InitContainerStatuses[1]); err != nil {
			t.Fatal(err)
		}
		if t1 := p.Status.InitContainerStatuses[0].State.Terminated; t1 != nil && t1.ExitCode == 0 {
			t.Fatalf("init1 succeeded: %+v", t1)
		}
		if p.Status.InitContainerStatuses[0].RestartCount >= 2 {
			break
		}
	}
	if last == nil {
		t.Fatal("no status seen")
	}
	if len(last.Status.InitContainerStatuses) != 2 || last.Status.InitContainerStatuses[0].RestartCount < 2 {
		t.Fatalf("init1 not restarted twice in time: %s", podSummary(last))
	}
	if last.Status.Phase != v1.PodPending {
		t.Errorf("phase %s, want Pending", last.Status.Phase)
	}
	for _, c := range last.Status.Conditions {
		if c.Type == v1.PodInitialized && (c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" ||
			c.Message != "containers with incomplete status: [init1 init2]") {
			t.Errorf("Initialized condition %+v", c)
		}
	}
}
