package vk_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/privengine"
	"github.com/cri-compose/cri-compose/test/sshhost"
)

// TestMultiHost turns two Docker hosts into two virtual nodes, one
// cri-compose and one vk-cri per host (docs/remote.md, "Many hosts, many nodes"):
// the suite's node on the machine's engine, and a second node on a
// private engine in its own network namespace reached over ssh:// through
// a real sshd (test/privengine, test/sshhost), as a remote host would be.
// Pods are placed with spec.nodeName, which is what the scheduler's
// binding writes: envtest runs no scheduler.
//
// Then the remote engine is stopped: only its node goes NotReady and its
// pod not Ready, while the local node stays Ready and its pod keeps
// running; the engine started again, the node and its pod are Ready again,
// with neither cri-compose nor vk-cri restarted.
func TestMultiHost(t *testing.T) {
	need(t)
	h := startRemoteNode(t)

	t.Run("podflow", func(t *testing.T) {
		// configMap, secret, downwardAPI and emptyDir volumes (staged on
		// the remote engine), logs and exec through the API server.
		podFlow(t, vkNode{name: h.node, runtime: "cri-compose", cri: h.cri})
	})
	if t.Failed() {
		return
	}
	t.Run("podLevelResourcesRefused", func(t *testing.T) { refusePodLevelResources(t, h) })
	t.Run("faults", func(t *testing.T) { multiHostFaults(t, h) })
}

// refusePodLevelResources: the remote engine's cgroups are not this
// host's, so cri-compose cannot make a pod cgroup there and says so in its
// status; vk-cri then refuses a pod with pod-level resources as kubelet
// refuses what it cannot run (Failed, PodLevelResourcesNotSupported, the
// runtime's reason), rather than run it without them, and the runtime
// never sees it.
func refusePodLevelResources(t *testing.T, h *remoteNode) {
	ns := namespace(t)
	zero := int64(0)
	createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pooled", Namespace: ns},
		Spec: v1.PodSpec{NodeName: h.node, TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Resources:  &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}},
			Containers: []v1.Container{busybox("app", "exec sleep 12345")}},
	})
	var p *v1.Pod
	waitFor(t, "the pod refused", time.Minute, func() (bool, string) {
		p = getPod(t, ns, "pooled")
		return p.Status.Phase == v1.PodFailed, podSummary(p)
	})
	const want = "Pod was rejected: pod-level resources are not supported on the node: the engine is on another host"
	if p.Status.Reason != "PodLevelResourcesNotSupported" || !strings.HasPrefix(p.Status.Message, want) {
		t.Errorf("status %s %q, want PodLevelResourcesNotSupported %q", p.Status.Reason, p.Status.Message, want)
	}
	if sbs := sandboxesOf(t, h.cri, string(p.UID)); len(sbs) != 0 {
		t.Errorf("the runtime got %d sandboxes of the refused pod", len(sbs))
	}
}

// remoteNode is the second host's node: its engine, the sshd in front of
// it, and its cri-compose and vk-cri.
type remoteNode struct {
	pe      *privengine.Engine
	sshd    *sshhost.Server
	node    string
	cri     internalapi.RuntimeService
	criSock string
	vkState string
	logs    [2]string // cri-compose's and vk-cri's
}

func startRemoteNode(t *testing.T) *remoteNode {
	t.Helper()
	start := time.Now()
	pe := privengine.Start(t, privengine.Options{})
	h := &remoteNode{pe: pe, node: "vk-e2e-remote-" + runID}
	h.sshd = sshhost.New(t, filepath.Join(t.TempDir(), "ssh"))

	// No registry: the images are loaded into the remote engine as they
	// are into the machine's (cri-compose would load pause itself).
	pc, err := dockerapi.New(pe.Host())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := loadImages(ctx, pc); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(runDir, "remote-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h.criSock = filepath.Join(dir, "cri.sock")
	h.vkState = filepath.Join(dir, "vk-state")
	h.logs = [2]string{filepath.Join(dir, "cri-compose.log"), filepath.Join(dir, "vk-cri.log")}
	stopCRI, err := startProcess(h.logs[0], filepath.Join(runDir, "bin", "cri-compose"), append([]string{
		"--listen", "unix://" + h.criSock, "--state-dir", filepath.Join(dir, "cri-state"),
		"--docker-host", h.sshd.URL(pe.Sock()),
		"--network", "vke2e-remote-" + runID, "--network-subnet", pe.Subnet(),
		"--stream-address", "127.0.0.1:0", "-v=2"}, h.sshd.ClientArgs()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopCRI)
	if err := waitSocket(h.criSock, time.Minute); err != nil {
		t.Fatalf("remote cri-compose: %v\n%s", err, tail(h.logs[0], 30))
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	rt, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint("unix://" + h.criSock).
		WithConnectionTimeout(time.Minute).
		WithUseStreaming(false).
		Build(dctx)
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	h.cri = rt

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	stopVK, err := startProcess(h.logs[1], filepath.Join(runDir, "bin", "vk-cri"),
		"--kubeconfig", mustNodeKubeconfig(t, h.node), "--nodename", h.node,
		"--cri-endpoint", "unix://"+h.criSock,
		"--listen-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--client-ca-file", kubeletCACert, "--node-ip", "127.0.0.1",
		"--state-dir", h.vkState, "--pods", "20", "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.deletePods()
		stopVK()
		checkNoRace(t, "vk-cri (remote)", h.logs[1])
		if t.Failed() {
			t.Logf("remote vk-cri log:\n%s\nremote cri-compose log:\n%s", tail(h.logs[1], 40), tail(h.logs[0], 40))
		}
	})
	if err := waitNodeReady(h.node, 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s\n%s", err, tail(h.logs[1], 40), tail(h.logs[0], 20))
	}
	t.Logf("remote node %s (cri-compose over %s) Ready %v after the engine's start", h.node, h.sshd.URL(pe.Sock()), time.Since(start).Round(time.Millisecond))
	return h
}

func loadImages(ctx context.Context, c *dockerapi.Client) error {
	if err := images.Busybox(ctx, c, image); err != nil {
		return fmt.Errorf("busybox into the remote engine: %w", err)
	}
	if err := pause.Ensure(ctx, c); err != nil {
		return fmt.Errorf("pause into the remote engine: %w", err)
	}
	return nil
}

// deletePods deletes the pods bound to the remote node and waits (bounded)
// until its vk-cri has removed them, before it stops.
func (h *remoteNode) deletePods() { deleteNodePods(h.node) }

// multiHostFaults: a web pod with configMap and secret volumes on each
// node; the remote one reached by port-forward; the remote engine stopped
// and started again.
func multiHostFaults(t *testing.T, h *remoteNode) {
	ns := namespace(t)
	ctx := context.Background()
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "site"},
		Data:       map[string]string{"index.html": "served from a configMap\n"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets(ns).Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"password": []byte("s3cret-multihost")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := func(name, node string) *v1.Pod {
		zero := int64(0)
		c := busybox("web", `echo "password=$(cat /etc/creds/password)"; exec httpd -f -p 8080 -h /www`)
		c.VolumeMounts = []v1.VolumeMount{{Name: "site", MountPath: "/www"}, {Name: "creds", MountPath: "/etc/creds"}}
		return createPod(t, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.PodSpec{
				// What the scheduler's binding would write.
				NodeName:                      node,
				TerminationGracePeriodSeconds: &zero,
				Containers:                    []v1.Container{c},
				Volumes: []v1.Volume{
					{Name: "site", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
						LocalObjectReference: v1.LocalObjectReference{Name: "site"}}}},
					{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "creds"}}},
				},
			},
		})
	}
	web("local", nodeName)
	web("remote", h.node)
	local := waitRunning(t, ns, "local")
	waitRunning(t, ns, "remote")
	for _, name := range []string{"local", "remote"} {
		waitFor(t, name+"'s log with the secret", 30*time.Second, func() (bool, string) {
			b, err := client.CoreV1().Pods(ns).GetLogs(name, &v1.PodLogOptions{Container: "web"}).DoRaw(ctx)
			return err == nil && strings.Contains(string(b), "password=s3cret-multihost"), fmt.Sprintf("%q %v", b, err)
		})
	}
	portForwardGet(t, ns, "remote", 8080, "/index.html", "served from a configMap")
	localID := containerStatus(local, "web").ContainerID
	criPid, vkPid := pidOf(t, h.criSock, "cri-compose"), pidOf(t, h.vkState, "vk-cri")

	// The remote engine goes away.
	t0 := time.Now()
	h.pe.Stop()
	localSteady := func() string {
		if !nodeReady(t, nodeName) {
			t.Errorf("the local node %s is not Ready while the remote engine is away", nodeName)
		}
		p := getPod(t, ns, "local")
		cs := containerStatus(p, "web")
		if condition(p, v1.PodReady) != v1.ConditionTrue || cs == nil || cs.ContainerID != localID || cs.RestartCount != 0 {
			t.Errorf("the local pod changed while the remote engine is away: %s", podSummary(p))
		}
		return podSummary(p)
	}
	waitFor(t, "the remote node NotReady", 90*time.Second, func() (bool, string) {
		localSteady()
		n := node(t, h.node)
		return nodeCondition(n) == v1.ConditionFalse, nodeMessage(n)
	})
	notReadyAfter := time.Since(t0)
	waitFor(t, "the remote pod not Ready (RuntimeUnavailable)", 60*time.Second, func() (bool, string) {
		localSteady()
		p := getPod(t, ns, "remote")
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady {
				// Not ContainersNotReady: that would be the engine's
				// containers seen stopping, not vk-cri seeing nothing.
				return c.Status == v1.ConditionFalse && c.Reason == "RuntimeUnavailable", podSummary(p) + " " + c.Reason
			}
		}
		return false, podSummary(p)
	})
	t.Logf("engine stopped: remote node NotReady after %v (%s), its pod not Ready after %v; local node Ready, local pod %s",
		notReadyAfter.Round(time.Millisecond), nodeMessage(node(t, h.node)), time.Since(t0).Round(time.Millisecond), localSteady())
	if out, err := tryExec(local, "web", "cat", "/etc/creds/password"); err != nil || out != "s3cret-multihost" {
		t.Errorf("exec in the local pod while the remote engine is away: %q %v", out, err)
	}

	// Back, without a restart of cri-compose or vk-cri.
	t1 := time.Now()
	h.pe.StartDaemon(false)
	waitFor(t, "the remote node Ready again", 2*time.Minute, func() (bool, string) {
		localSteady()
		n := node(t, h.node)
		return nodeCondition(n) == v1.ConditionTrue, nodeMessage(n) + "\n" + tail(h.logs[0], 10)
	})
	readyAfter := time.Since(t1)
	var p *v1.Pod
	waitFor(t, "the remote pod Running and Ready again", 3*time.Minute, func() (bool, string) {
		localSteady()
		p = getPod(t, ns, "remote")
		return p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue, podSummary(p)
	})
	t.Logf("engine started again: remote node Ready after %v, its pod Running and Ready after %v: %s",
		readyAfter.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond), podSummary(p))
	portForwardGet(t, ns, "remote", 8080, "/index.html", "served from a configMap")
	if c, v := pidOf(t, h.criSock, "cri-compose"), pidOf(t, h.vkState, "vk-cri"); c != criPid || v != vkPid {
		t.Errorf("restarted: cri-compose pid %d → %d, vk-cri pid %d → %d", criPid, c, vkPid, v)
	}
	localSteady()
}

func node(t *testing.T, name string) *v1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

func nodeReady(t *testing.T, name string) bool {
	t.Helper()
	return nodeCondition(node(t, name)) == v1.ConditionTrue
}

func nodeCondition(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func nodeMessage(n *v1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
		}
	}
	return "no Ready condition"
}

// pidOf is the pid of the process named name whose command line holds
// arg (a path of its own), from /proc; 0 when there is none.
func pidOf(t *testing.T, arg, name string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) == name && bytes.Contains(b, []byte(arg)) {
			return pid
		}
	}
	return 0
}
