package vk_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// What TestMain set up: a real kube-apiserver and etcd on loopback (through
// envtest), bin/cri-compose on the machine's Docker Engine (own socket,
// state dir and network), and bin/vk-cri registered as node nodeName,
// pointed at it.
var (
	runID    string
	repoRoot string
	runDir   string

	engine *dockerapi.Client
	image  string // busybox, loaded into the engine

	env        *envtest.Environment
	restConfig *rest.Config
	client     kubernetes.Interface

	criSock  string
	cri      internalapi.RuntimeService
	nodeName string
	// kubeletAddr is vk-cri's kubelet API; kubeletClient holds the
	// client certificate the API server uses to call it.
	kubeletAddr   string
	kubeletCACert string // the CA that signed the client certificate
	kubeletClient [2]string

	vkLog string
	// nodeProc is the node's process (vk-cri, or kubelet in its place),
	// criProc cri-compose's: the benchmarks measure their CPU.
	nodeProc, criProc *suite.Process
	// stopVK stops vk-cri; restartVK stops it and starts it again (on the
	// same node and state dir), with its log in a new file.
	stopVK    func()
	restartVK func() error
	// restartCRI stops cri-compose and starts it again (same socket and
	// state dir), with its log in a new file.
	restartCRI func() error

	// prepared says whether the set-up succeeded: every test skips (fails
	// in CI) or fails when it did not.
	prepared *suite.Setup
	timings  []string
	// raceReport is the first data race vk-cri (built with -race) reported.
	raceReport string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	start := time.Now()
	cleanup := setup()
	if prepared.Ready() {
		fmt.Fprintf(os.Stderr, "vk e2e: run %s ready in %v (%s)\n", runID, time.Since(start).Round(time.Millisecond), strings.Join(timings, ", "))
	}
	code := m.Run()
	cleanup()
	if raceReport != "" {
		fmt.Fprintf(os.Stderr, "vk e2e: vk-cri reported a data race:\n%s\n", raceReport)
		code = 1
	}
	return code
}

func need(t *testing.T) {
	t.Helper()
	prepared.Need(t)
}

func timed(what string, start time.Time) {
	timings = append(timings, fmt.Sprintf("%s %v", what, time.Since(start).Round(100*time.Millisecond)))
}

// setup fills the globals and returns what undoes it.
func setup() (cleanup func()) {
	prepared = suite.NewSetup("vke2e")
	cleanup = prepared.Cleanup
	fail := func(err error) func() { prepared.Fail(err); return cleanup }
	runID, runDir, repoRoot, engine = prepared.ID, prepared.Dir, prepared.Repo, prepared.Engine
	if !prepared.Ready() {
		return cleanup
	}
	var err error
	if os.Getenv("VK_E2E_KEEP") != "" { // logs and state, for a look after the run
		prepared.Keep()
	}

	// The binaries: the control plane from the tool cache (built on the
	// first run), cri-compose and vk-cri from this tree, concurrently.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var (
		wg                 sync.WaitGroup
		apiserver, etcdBin string
		toolsTook          time.Duration
		toolsErr, buildErr error
		binDir             = filepath.Join(runDir, "bin")
		buildStart         = time.Now()
	)
	toolsDir := filepath.Join(repoRoot, "test", "vk", "tools")
	wg.Go(func() {
		apiserver, etcdBin, toolsTook, toolsErr = controlPlaneBinaries(ctx, toolsDir)
		if toolsErr == nil && (nodeConformance || networking) { // node_conformance_test.go
			var more time.Duration
			more, toolsErr = nodeConformanceTools(ctx, toolsDir, nodeConformance || networkConformance)
			toolsTook += more
		}
		if toolsErr == nil && networking { // networking_test.go
			var more time.Duration
			more, toolsErr = networkTools(ctx, toolsDir)
			toolsTook += more
		}
	})
	wg.Go(func() {
		// vk-cri with the race detector: the suite is its busiest user.
		// VK_E2E_RACE=0 (make bench-vk) builds it as users run it, for
		// timings the detector does not slow.
		race := []string{"-race"}
		if os.Getenv("VK_E2E_RACE") == "0" {
			race = nil
		}
		_, buildErr = toolcache.Go(ctx, repoRoot, append(append([]string{"build"}, race...), "-o", binDir+"/", "./cmd/vk-cri")...)
		if buildErr == nil {
			_, buildErr = toolcache.Go(ctx, repoRoot, "build", "-o", binDir+"/", "./cmd/cri-compose")
		}
	})
	image = "localhost/cri-compose/vk-e2e-busybox:" + runID
	if err := images.Busybox(ctx, engine, image); err != nil {
		wg.Wait()
		if errors.Is(err, images.ErrNoBusybox) {
			prepared.Skip = err.Error()
			return cleanup
		}
		return fail(err)
	}
	prepared.Defer(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = engine.ImageRemove(ctx, image, true)
	})
	wg.Wait()
	if toolsErr != nil {
		return fail(toolsErr)
	}
	if buildErr != nil {
		return fail(buildErr)
	}
	if toolsTook > 0 {
		timings = append(timings, fmt.Sprintf("control plane built in %v (cold)", toolsTook.Round(time.Second)))
	}
	timed("binaries", buildStart)
	var criExtra []string // cri-compose's flags for node conformance
	if nodeConformance || networking {
		start := time.Now()
		if criExtra, err = startE2ERegistry(ctx, toolsDir); err != nil {
			return fail(err)
		}
		timed("e2e images", start)
	}

	// Certificates: a CA for the kubelet API's clients, and the client
	// certificate the API server presents to it (for logs and exec).
	pki := filepath.Join(runDir, "pki")
	if kubeletCACert, kubeletClient, err = makeKubeletClientPKI(pki); err != nil {
		return fail(err)
	}
	// The aggregation layer's front proxy, for metrics-server (kubectl top).
	frontProxy, err := newSigningCA(pki, "vk-e2e-front-proxy-ca")
	if err != nil {
		return fail(err)
	}
	proxyCert, proxyKey, err := frontProxy.issue(pki, "front-proxy-client", &x509.Certificate{
		Subject: pkix.Name{CommonName: "front-proxy-client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return fail(err)
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	nodeIP := "127.0.0.1"
	if networking { // the node's address, which kube-proxy's NodePorts and the second host use
		if machineIP, err = primaryIP(); err != nil {
			return fail(err)
		}
		nodeIP = machineIP
	}
	kubeletAddr = net.JoinHostPort(nodeIP, strconv.Itoa(port))

	// The control plane.
	start := time.Now()
	assets := filepath.Join(runDir, "assets")
	if err := os.MkdirAll(assets, 0o755); err != nil {
		return fail(err)
	}
	for name, p := range map[string]string{"kube-apiserver": apiserver, "etcd": etcdBin} {
		if err := os.Symlink(p, filepath.Join(assets, name)); err != nil {
			return fail(err)
		}
	}
	ctrllog.SetLogger(logr.Discard()) // envtest's own logging is not needed
	env = &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: time.Minute}
	api := env.ControlPlane.GetAPIServer()
	args := api.Configure()
	if networking { // networking_test.go: served on the machine's address
		apiPort, err := freePort()
		if err != nil {
			return fail(err)
		}
		api.SecureServing.Address, api.SecureServing.Port = machineIP, strconv.Itoa(apiPort)
		for k, v := range clusterAPIArgs() {
			args.Set(k, v)
		}
	}
	args.Set("kubelet-client-certificate", kubeletClient[0])
	args.Set("kubelet-client-key", kubeletClient[1])
	// The node's Hostname address does not resolve here.
	args.Set("kubelet-preferred-address-types", "InternalIP")
	// The aggregation layer as kubeadm sets it up; with aggregator
	// routing, it reaches an APIService's endpoints, not its cluster IP
	// (there is no kube-proxy here).
	args.Set("requestheader-client-ca-file", frontProxy.path)
	args.Set("requestheader-allowed-names", "front-proxy-client")
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", proxyCert)
	args.Set("proxy-client-key-file", proxyKey)
	args.Set("enable-aggregator-routing", "true")
	for k, v := range nodeAuthorization { // identity_test.go
		args.Set(k, v)
	}
	if nodeConformance || networking { // envtest turns ServiceAccount admission off
		args.Disable("disable-admission-plugins")
	}
	if restConfig, err = env.Start(); err != nil {
		return fail(fmt.Errorf("start control plane: %w", err))
	}
	prepared.Defer(func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "vk e2e: stop control plane: %v\n", err)
		}
	})
	if client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return fail(err)
	}
	kubeconfig := filepath.Join(runDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return fail(err)
	}
	if nodeConformance || networking {
		if err := startKubeControllers(kubeconfig); err != nil {
			return fail(err)
		}
	}
	timed("control plane", start)

	// cri-compose.
	start = time.Now()
	criSock = filepath.Join(runDir, "cri.sock")
	network := "vke2e-" + runID
	criProc = &suite.Process{Name: "cri-compose", Bin: filepath.Join(binDir, "cri-compose"), Dir: runDir, OwnGroup: true,
		Args: []string{"--listen", "unix://" + criSock, "--state-dir", filepath.Join(runDir, "cri-state"),
			"--network", network, "--stream-address", "127.0.0.1:0", "-v=2"}}
	criProc.Args = append(criProc.Args, criExtra...)
	if networking { // flanneld masquerades what leaves the cluster; VXLAN's MTU
		criProc.Args = append(criProc.Args, "--ip-masq=false", "--network-mtu="+strconv.Itoa(podMTU()))
	}
	if err := criProc.Start(); err != nil {
		return fail(err)
	}
	restartCRI = func() error {
		if err := criProc.Restart(); err != nil {
			return err
		}
		return suite.WaitSocket(criSock, 30*time.Second, criProc.Exited())
	}
	prepared.Defer(func() {
		_, _ = criProc.Stop(syscall.SIGTERM)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Every pod this run's cri-compose made, whoever's namespace it
		// is in: e2e.test ends without waiting for its namespaces to go.
		left, _ := engine.ContainerList(ctx, "io.kubernetes.pod.namespace")
		for _, c := range left {
			if strings.HasPrefix(c.Labels["com.docker.compose.project.working_dir"], runDir+string(filepath.Separator)) {
				_ = engine.ContainerRemove(ctx, c.ID)
			}
		}
		if err := engine.NetworkRemove(ctx, network); err != nil && !dockerapi.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "vk e2e: remove network %s: %v\n", network, err)
		}
	})
	if err := suite.WaitSocket(criSock, 30*time.Second, criProc.Exited()); err != nil {
		return fail(fmt.Errorf("cri-compose: %w\n%s", err, criProc.LogTail(30)))
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	cri, err = remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint("unix://" + criSock).
		WithConnectionTimeout(time.Minute).
		WithUseStreaming(false).
		Build(dctx)
	dcancel()
	if err != nil {
		return fail(err)
	}
	timed("cri-compose", start)

	// vk-cri.
	start = time.Now()
	nodeName = "vk-e2e-" + runID
	if vkKubeconfig, err = nodeKubeconfig(nodeName); err != nil {
		return fail(err)
	}
	if kubeletNode { // kubelet_node_test.go: a real kubelet in vk-cri's place
		if err := startKubeletNode(ctx, toolsDir, vkKubeconfig, network); err != nil {
			return fail(err)
		}
		timed("kubelet node Ready", start)
		return cleanup
	}
	vkLog = filepath.Join(runDir, "vk-cri.log")
	vkArgs := []string{
		"--kubeconfig", vkKubeconfig, "--nodename", nodeName, "--cri-endpoint", "unix://" + criSock,
		"--listen-address", kubeletAddr, "--client-ca-file", kubeletCACert, "--node-ip", nodeIP,
		"--state-dir", filepath.Join(runDir, "vk-state"), "--pods", "20", "-v=3",
		// Small enough that TestLogRotation rotates often (logrotate_test.go).
		"--container-log-max-size=1Mi", "--container-log-max-files=3", "--container-log-monitor-interval=3s"}
	if nodeConformance || networking { // the scheduler places the suite's pods on it
		vkArgs = append(vkArgs, "--register-with-taints=", "--pods=110")
	}
	if networking {
		vkArgs = append(vkArgs, "--cluster-dns", clusterDNSIP, "--cluster-domain", clusterDomain)
	} else if !nodeConformance {
		// TestAdmissionSysctlAllowed. Not for the e2e suite, whose
		// sysctl spec expects kernel.msgmax refused, as by kubelet's
		// defaults.
		vkArgs = append(vkArgs, "--allowed-unsafe-sysctls=kernel.msg*")
	}
	// VK_E2E_ARGS: more vk-cri flags, to compare settings (make bench-vk).
	vkArgs = append(vkArgs, strings.Fields(os.Getenv("VK_E2E_ARGS"))...)
	vkStarts := 0
	startVK := func() error {
		vkStarts++
		vkLog = filepath.Join(runDir, fmt.Sprintf("vk-cri.%d.log", vkStarts))
		p, err := startProc(vkLog, filepath.Join(binDir, "vk-cri"), vkArgs...)
		if err != nil {
			return err
		}
		nodeProc, stopVK = p, func() { _, _ = p.Stop(syscall.SIGTERM) }
		return nil
	}
	if err := startVK(); err != nil {
		return fail(err)
	}
	restartVK = func() error {
		stopVK()
		return startVK()
	}
	prepared.Defer(func() {
		deleteAllPods()
		stopVK()
		for i := 1; i <= vkStarts; i++ {
			b, err := os.ReadFile(filepath.Join(runDir, fmt.Sprintf("vk-cri.%d.log", i)))
			if i := bytes.Index(b, []byte("WARNING: DATA RACE")); err == nil && i >= 0 {
				raceReport = string(b[i:min(len(b), i+8000)])
			}
		}
	})
	if err := waitNodeReady(nodeName, time.Minute); err != nil {
		return fail(fmt.Errorf("vk-cri: %w\n%s", err, tail(vkLog, 40)))
	}
	timed("vk-cri node Ready", start)
	return cleanup
}

// deleteAllPods deletes the test pods and waits for vk-cri to remove them,
// so that nothing is left in the engine.
func deleteAllPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, "vke2e-") {
			_ = client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}
	}
	// Best effort, within the teardown's 90 s: a list that fails ends
	// the wait, and what is left then stays for the engine's sweep.
	deadline, _ := ctx.Deadline()
	_ = suite.Poll("the node's pods gone from the API", time.Until(deadline), func() (bool, string) {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			return true, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprint(len(pods.Items), " left")
	})
	// A pod that was not running is gone from the API before vk-cri has
	// removed it from the runtime.
	_ = suite.Poll("the node's pods gone from the runtime", time.Until(deadline), func() (bool, string) {
		sbs, err := cri.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"vk-cri.cri-compose.io/node": nodeName}})
		return err != nil || len(sbs) == 0, fmt.Sprint(len(sbs), " left")
	})
}

// startProcess runs a binary with its output in logPath; stop sends
// SIGTERM and waits (then SIGKILL).
func startProcess(logPath, bin string, args ...string) (stop func(), err error) {
	p, err := startProc(logPath, bin, args...)
	if err != nil {
		return nil, err
	}
	return func() { _, _ = p.Stop(syscall.SIGTERM) }, nil
}

// startProc is startProcess, giving the process.
func startProc(logPath, bin string, args ...string) (*suite.Process, error) {
	p := &suite.Process{Name: filepath.Base(bin), Bin: bin, Args: args, LogFile: logPath, OwnGroup: true}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

func waitSocket(path string, d time.Duration) error { return suite.WaitSocket(path, d, nil) }

func freePort() (int, error) { return freePortOn("127.0.0.1") }

var tail = suite.Tail
