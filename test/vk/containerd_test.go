package vk_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// vk-cri depends on nothing of cri-compose but CRI: TestContainerd runs the
// basic pod flow (TestPod's) on a second virtual node whose vk-cri speaks to
// containerd's CRI plugin instead, with the same API server.

func TestContainerd(t *testing.T) {
	need(t)
	ctrd := suite.StartContainerd(t, filepath.Join(runDir, "containerd"), runID, map[string]func(*os.File) error{
		"busybox.tar": func(f *os.File) error { _, err := images.BusyboxArchive(f, image); return err },
	})

	n := vkNode{name: "vk-e2e-ctrd-" + runID, runtime: "containerd", cri: ctrd.CRI}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	vkCtrdLog := filepath.Join(runDir, "vk-cri-containerd.log")
	stop, err := startProcess(vkCtrdLog, filepath.Join(runDir, "bin", "vk-cri"),
		"--kubeconfig", mustNodeKubeconfig(t, n.name), "--nodename", n.name,
		"--cri-endpoint", "unix://"+ctrd.Sock,
		"--listen-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--client-ca-file", kubeletCACert, "--node-ip", "127.0.0.1",
		"--taint", "virtual-kubelet.io/provider=containerd:NoSchedule",
		"--state-dir", filepath.Join(runDir, "vk-ctrd-state"), "--pods", "20", "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		checkNoRace(t, "vk-cri (containerd)", vkCtrdLog)
		if t.Failed() {
			t.Logf("vk-cri (containerd) log:\n%s\ncontainerd log:\n%s", tail(vkCtrdLog, 40), tail(ctrd.Log, 30))
		}
	})
	start := time.Now()
	if err := waitNodeReady(n.name, time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, tail(vkCtrdLog, 40))
	}
	t.Logf("node %s Ready in %v", n.name, time.Since(start).Round(time.Millisecond))
	node, err := client.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(v, "containerd://") {
		t.Errorf("containerRuntimeVersion = %q, want containerd://…", v)
	}
	podFlow(t, n)
}
