package vk_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// TestPodCIDR: a node of its own (cri-compose on its own pod network and
// vk-cri) takes its pods' addresses from the node's pod CIDR, as a
// kubelet node's CNI does. With no spec.podCIDRs on the Node, vk-cri's
// --pod-cidr is handed to the runtime. Once the Node is given dual-stack
// podCIDRs (as kube-controller-manager allocates them) while a pod runs on
// the old subnet, the runtime refuses to move and the pod keeps running;
// once that pod is gone the change takes, and a new pod's status.podIPs
// hold one address of each family, from the Node's CIDRs.
func TestPodCIDR(t *testing.T) {
	need(t)
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(runDir, "podcidr-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Subnets no other network of the engine is likely to hold (10.200-10.239:
	// the networking suite's cluster CIDR is 10.244.0.0/16).
	second := rand.IntN(200) + 20
	flagCIDR := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(40), second))
	nodeV4 := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(40), second+1))
	nodeV6 := netip.MustParsePrefix(fmt.Sprintf("fd00:cd:%x::/64", rand.IntN(0xffff)))

	network := "vke2e-podcidr-" + runID
	criSock := filepath.Join(dir, "cri.sock")
	logs := [2]string{filepath.Join(dir, "cri-compose.log"), filepath.Join(dir, "vk-cri.log")}
	stopCRI, err := startProcess(logs[0], filepath.Join(runDir, "bin", "cri-compose"),
		"--listen", "unix://"+criSock, "--state-dir", filepath.Join(dir, "cri-state"),
		"--network", network, "--stream-address", "127.0.0.1:0", "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCRI()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, _ := engine.ContainerList(ctx, "io.kubernetes.pod.namespace")
		for _, c := range left {
			if c.NetworkSettings != nil && c.NetworkSettings.Networks[network] != nil {
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

	node := "vk-e2e-podcidr-" + runID
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	stopVK, err := startProcess(logs[1], filepath.Join(runDir, "bin", "vk-cri"),
		"--kubeconfig", mustNodeKubeconfig(t, node), "--nodename", node,
		"--cri-endpoint", "unix://"+criSock,
		"--listen-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--client-ca-file", kubeletCACert, "--node-ip", "127.0.0.1",
		"--state-dir", filepath.Join(dir, "vk-state"), "--pod-cidr", flagCIDR.String(), "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteNodePods(node)
		stopVK()
		checkNoRace(t, "vk-cri", logs[1])
		if t.Failed() {
			t.Logf("vk-cri log:\n%s\ncri-compose log:\n%s", tail(logs[1], 40), tail(logs[0], 40))
		}
	})
	if err := waitNodeReady(node, time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, tail(logs[1], 40))
	}

	ns := namespace(t)
	zero := int64(0)
	run := func(name string) *v1.Pod {
		t.Helper()
		return createPod(t, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
				Containers: []v1.Container{busybox("c", "while true; do sleep 1; done")}},
		})
	}
	waitIPs := func(name string, want ...netip.Prefix) []v1.PodIP {
		t.Helper()
		var ips []v1.PodIP
		waitFor(t, "pod "+name+" Running with addresses in "+fmt.Sprint(want), 2*time.Minute, func() (bool, string) {
			p := getPod(t, ns, name)
			ips = p.Status.PodIPs
			if p.Status.Phase != v1.PodRunning || len(ips) != len(want) {
				return false, fmt.Sprintf("%s %v", p.Status.Phase, ips)
			}
			for i, pfx := range want {
				a, err := netip.ParseAddr(ips[i].IP)
				if err != nil || !pfx.Contains(a) {
					return false, fmt.Sprintf("%s %v", p.Status.Phase, ips)
				}
			}
			return p.Status.PodIP == ips[0].IP, "podIP " + p.Status.PodIP
		})
		return ips
	}

	// The Node has no podCIDRs: --pod-cidr holds.
	run("before")
	before := waitIPs("before", flagCIDR)

	// The Node gets dual-stack podCIDRs; the running pod keeps its
	// address, since the runtime refuses to move the network under it.
	patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q,%q]}}`, nodeV4, nodeV4, nodeV6)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vk-cri told the runtime refused the Node's pod CIDR", time.Minute, func() (bool, string) {
		b, _ := os.ReadFile(logs[1])
		return bytes.Contains(b, []byte("The runtime did not take the pod CIDR")) && bytes.Contains(b, []byte("containers attached")), "no such line yet"
	})
	if p := getPod(t, ns, "before"); p.Status.Phase != v1.PodRunning || p.Status.PodIPs[0] != before[0] {
		t.Fatalf("pod before the change: %s %v, want Running on %v", p.Status.Phase, p.Status.PodIPs, before)
	}

	// With the node's pods gone, vk-cri's next try takes.
	deletePod(t, ns, "before", time.Minute)
	waitFor(t, "the runtime on the Node's pod CIDR", time.Minute, func() (bool, string) {
		b, _ := os.ReadFile(logs[1])
		want := fmt.Sprintf(`"Pod CIDR handed to the runtime" podCIDR="%s,%s"`, nodeV4, nodeV6)
		return bytes.Contains(b, []byte(want)), "no " + want + " yet"
	})
	run("after")
	ips := waitIPs("after", nodeV4, nodeV6)
	t.Logf("pod IPs before %v, after %v", before, ips)
	if !strings.Contains(ips[1].IP, ":") {
		t.Errorf("second pod IP %s is not IPv6", ips[1].IP)
	}
}
