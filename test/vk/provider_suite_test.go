package vk_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	vke2e "github.com/virtual-kubelet/virtual-kubelet/test/e2e"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/test/images/critest"
	"github.com/cri-compose/cri-compose/test/registry"
)

// The kubelet port virtual-kubelet's suite reaches the node on: it asks
// the API server to proxy to the pod named after the node on
// https:NODE:10250, the way virtual-kubelet runs in its own CI (as a pod
// of that name, on the host's network).
const providerSuitePort = 10250

// providerSuiteImages are the images the suite's pods name ("foo", "bar",
// "baz": Docker Hub's library/foo:latest and so on, pulled since they have
// no tag). Its own provider runs nothing; here each is cri-compose's pause,
// a process that runs until stopped, served through a mirror of docker.io.
var providerSuiteImages = []string{"foo", "bar", "baz"}

// TestProviderSuite runs virtual-kubelet's own end-to-end suite for
// providers (github.com/virtual-kubelet/virtual-kubelet/test/e2e) against
// a node of its own: vk-cri on a cri-compose that pulls the suite's images
// from a registry on this machine. The suite reaches the node's kubelet API
// twice over: through the API server's node proxy (/pods, /runningpods/;
// the API server's kubelet client certificate), and through the pod proxy
// to https:NODE:10250 (/stats/summary, /metrics/resource; no client
// certificate at all). So the node
//   - has the host's own address as its InternalIP, and serves the kubelet
//     API there on port 10250: the API server proxies to neither a
//     loopback address nor another port;
//   - runs a hostNetwork pod named after itself, whose pod IP is the
//     node's address, as virtual-kubelet's own CI runs it;
//   - lets requests without credentials through as system:anonymous
//     (--anonymous-auth), which this throwaway cluster allows to read the
//     node's stats and metrics, and nothing else.
func TestProviderSuite(t *testing.T) {
	need(t)
	ctx := context.Background()
	hostIP, err := hostIP()
	if err != nil {
		t.Skipf("no address but loopback to serve the kubelet API on: %v", err)
	}
	listen := net.JoinHostPort(hostIP, strconv.Itoa(providerSuitePort))
	if l, err := net.Listen("tcp", listen); err != nil {
		t.Fatalf("the suite needs %s for the node's kubelet API: %v", listen, err)
	} else {
		_ = l.Close()
	}
	dir := filepath.Join(runDir, "provider-suite")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	reg, err := registry.Start(t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	img := critest.Image{Files: pause.Files(), Config: pause.Config()}
	for _, name := range providerSuiteImages {
		img.Refs = append(img.Refs, "docker.io/library/"+name+":latest")
	}
	if err := img.Push(ctx, reg); err != nil {
		t.Fatal(err)
	}

	ns := namespace(t)
	network := "vke2e-vksuite-" + runID
	criSock := filepath.Join(dir, "cri.sock")
	logs := [2]string{filepath.Join(dir, "cri-compose.log"), filepath.Join(dir, "vk-cri.log")}
	stopCRI, err := startProcess(logs[0], filepath.Join(runDir, "bin", "cri-compose"),
		"--listen", "unix://"+criSock, "--state-dir", filepath.Join(dir, "cri-state"),
		"--network", network, "--stream-address", "127.0.0.1:0",
		"--registry-mirror", "docker.io=http://"+reg.Host, "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCRI()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The node's own pod is on the host's network, not on network.
		left, _ := engine.ContainerList(ctx, "io.kubernetes.pod.namespace")
		for _, c := range left {
			if c.Labels["io.kubernetes.pod.namespace"] == ns ||
				c.NetworkSettings != nil && c.NetworkSettings.Networks[network] != nil {
				_ = engine.ContainerRemove(ctx, c.ID)
			}
		}
		if err := engine.NetworkRemove(ctx, network); err != nil && !dockerapi.IsNotFound(err) {
			t.Logf("remove network %s: %v", network, err)
		}
	})
	if err := waitSocket(criSock, time.Minute); err != nil {
		t.Fatalf("cri-compose: %v\n%s", err, tail(logs[0], 30))
	}

	node := providerSuiteNode()
	if err := allowAnonymousNodeReads(ctx, t); err != nil {
		t.Fatal(err)
	}
	stopVK, err := startProcess(logs[1], filepath.Join(runDir, "bin", "vk-cri"),
		"--kubeconfig", mustNodeKubeconfig(t, node), "--nodename", node,
		"--cri-endpoint", "unix://"+criSock, "--listen-address", listen,
		"--client-ca-file", kubeletCACert, "--anonymous-auth", "--node-ip", hostIP,
		"--state-dir", filepath.Join(dir, "vk-state"), "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteNodePods(node)
		stopVK()
		checkNoRace(t, "vk-cri", logs[1])
		if t.Failed() {
			t.Logf("vk-cri log:\n%s\ncri-compose log:\n%s", tail(logs[1], 60), tail(logs[0], 40))
		}
	})
	if err := waitNodeReady(node, time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, tail(logs[1], 40))
	}

	// The pod the suite's pod proxy reaches the node through.
	endpoint, err := client.CoreV1().Pods(ns).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: v1.PodSpec{NodeName: node, HostNetwork: true,
			Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}},
			Containers:  []v1.Container{{Name: "kubelet-api", Image: "foo", ImagePullPolicy: v1.PullIfNotPresent}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node's own pod Running with the node's address", 2*time.Minute, func() (bool, string) {
		p := getPod(t, ns, endpoint.Name)
		return p.Status.Phase == v1.PodRunning && p.Status.PodIP == hostIP, podSummary(p)
	})

	vke2e.NewEndToEndTestSuite(vke2e.EndToEndTestSuiteConfig{
		Kubeconfig: filepath.Join(runDir, "kubeconfig"),
		Namespace:  ns,
		NodeName:   node,
		ShouldSkipTest: func(name string) bool {
			if why, ok := providerSuiteSkips[name]; ok {
				t.Logf("skipping %s: %s", name, why)
				return true
			}
			return false
		},
	}).Run(t)
}

// providerSuiteSkips are the suite's tests that assert virtual-kubelet's
// own pod controller rather than a kubelet's behaviour, with why.
var providerSuiteSkips = map[string]string{
	// Both also wait for virtual-kubelet's event (MandatoryConfigMapNotFound,
	// MandatorySecretNotFound), which vk-cri records; then they require the
	// pod to be absent from /runningpods/.
	"TestCreatePodWithMandatoryInexistentConfigMap": mandatoryEnvSkip,
	"TestCreatePodWithMandatoryInexistentSecrets":   mandatoryEnvSkip,
}

const mandatoryEnvSkip = "virtual-kubelet's pod controller resolves a pod's env before its provider sees the pod, " +
	"so such a pod never runs; kubelet, and vk-cri as it, runs the pod's sandbox first and then holds the " +
	"container in CreateContainerConfigError, so the pod is in /runningpods/ as it is on a kubelet"

func providerSuiteNode() string { return "vk-e2e-vksuite-" + runID }

// allowAnonymousNodeReads lets system:anonymous read the kubelet API's
// stats and metrics (nodes/stats, nodes/metrics), as the suite's pod-proxy
// requests come without credentials. Undone when t ends.
func allowAnonymousNodeReads(ctx context.Context, t *testing.T) error {
	name := "vke2e-" + runID + "-anonymous-node-reads"
	rbac := client.RbacV1()
	if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/stats", "nodes/metrics"},
			Verbs: []string{"get", "create"}}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"}},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return nil
}
