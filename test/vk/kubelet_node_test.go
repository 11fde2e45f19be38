package vk_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cri-compose/cri-compose/test/suite"
)

// kubeletNode puts a real kubelet, of the Kubernetes version the e2e
// suite is (tools/go.mod), in vk-cri's place, on cri-compose: the node
// conformance specs run against it (make conformance-node NODE=kubelet),
// the proof that cri-compose is a CRI runtime a kubelet takes as it takes
// containerd, and the benchmarks measure it beside vk-cri (make bench-vk).
var kubeletNode = os.Getenv("VK_NODE") == "kubelet"

// kubeletSysctls are the host sysctls kubelet sets at start when it does
// not protect the kernel's defaults (setupKernelTunables); they are put
// back once it stops, as the machine is shared.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// startKubeletNode starts kubelet as node nodeName, on cri-compose's
// socket, with its API at kubeletAddr's port trusting the API server's
// client certificate (kubeletCACert), and waits for the node to be Ready.
//
// Kubelet refuses a loopback node IP, and the API server reaches a node's
// API at its InternalIP; so the node's address is the host's side of the
// pods' bridge (network), which this run made, and its API listens there
// alone.
func startKubeletNode(ctx context.Context, toolsDir, nodeKubeconfig, network string) error {
	bin, took, err := kubeBinary(ctx, toolsDir, "kubelet", "k8s.io/kubernetes/cmd/kubelet")
	if err != nil {
		return err
	}
	if took > 0 {
		timings = append(timings, fmt.Sprintf("kubelet built in %v (cold)", took.Round(time.Second)))
	}
	saved := map[string][]byte{}
	for _, s := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			saved[s] = b
		}
	}
	prepared.Defer(func() {
		for s, b := range saved {
			if err := os.WriteFile("/proc/sys/"+s, b, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "vk e2e: restore %s: %v\n", s, err)
			}
		}
	})

	root := filepath.Join(runDir, "kubelet")
	for _, d := range []string{root, filepath.Join(root, "pod-logs")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	var host string
	if err := suite.Poll("the pods' network "+network, 30*time.Second, func() (bool, string) {
		subnets, _, err := engine.NetworkSubnets(ctx, network)
		for _, s := range subnets {
			if s.Addr().Is4() {
				host = s.Masked().Addr().Next().String() // the engine's gateway: the bridge's own address
				return true, ""
			}
		}
		return false, fmt.Sprint(subnets, err)
	}); err != nil {
		return err
	}
	_, port, _ := strings.Cut(kubeletAddr, ":")
	kubeletAddr = net.JoinHostPort(host, port) // where it listens
	// Only what this node needs that kubelet's defaults do not give:
	// cri-compose's socket, Docker's cgroupfs driver (and cgroup v1, which
	// kubelet refuses by default since 1.35, where the host has it), the API server's
	// client CA, no swap check, no eviction (the machine's disk and
	// memory are the other suites' too), no node allocatable enforced (it
	// would carve the machine's cgroups), and its files under the run's
	// folder.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %s
readOnlyPort: 0
healthzPort: 0
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
registerWithTaints: []
maxPods: 110
podLogsDir: %s
resolvConf: /etc/resolv.conf
clusterDomain: cluster.local
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", imagefs.available: "0%%", nodefs.inodesFree: "0%%"}
imageGCHighThresholdPercent: 100
enforceNodeAllocatable: []
makeIPTablesUtilChains: false
serializeImagePulls: false
`, host, port, criSock, kubeletCACert, filepath.Join(root, "pod-logs"))
	cfgPath := filepath.Join(root, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		return err
	}
	vkLog = filepath.Join(runDir, "kubelet.log")
	p, err := startProc(vkLog, bin, "--config", cfgPath, "--kubeconfig", nodeKubeconfig,
		"--hostname-override", nodeName, "--node-ip", host, "--root-dir", root,
		"--cert-dir", filepath.Join(root, "pki"), "-v=2")
	if err != nil {
		return err
	}
	nodeProc = p
	prepared.Defer(func() {
		deleteAllPods()
		_, _ = p.Stop(syscall.SIGTERM)
		// What kubelet mounted (its root, which it bind-mounts onto
		// itself to share mounts, and its pods' tmpfs volumes) goes with
		// it.
		mounts, _ := suite.MountsUnder(root)
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				fmt.Fprintf(os.Stderr, "vk e2e: unmount %s: %v\n", m, err)
			}
		}
	})
	if err := waitNodeReady(nodeName, 2*time.Minute); err != nil {
		return fmt.Errorf("kubelet: %w\n%s", err, tail(vkLog, 40))
	}
	return nil
}
