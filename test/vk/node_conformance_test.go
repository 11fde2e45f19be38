package vk_test

import (
	"context"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/images/critest"
	"github.com/cri-compose/cri-compose/test/images/kubee2e"
	"github.com/cri-compose/cri-compose/test/registry"
	"github.com/cri-compose/cri-compose/test/suite"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// Node conformance: with VK_NODE_CONFORMANCE=1 (make conformance-node),
// TestMain sets the node up as a cluster's node for Kubernetes' own e2e
// suite, and TestNodeConformance runs that suite's [NodeConformance] specs
// against it. What a plain run of the suite lacks and the e2e framework
// needs:
//   - kube-controller-manager: its service account controller makes each
//     test namespace's default ServiceAccount, which the framework waits
//     for, and its namespace, garbage collector and workload controllers
//     clean up after the specs;
//   - kube-scheduler, and a node without vk-cri's default taint, so that
//     the specs' pods land on it;
//   - the ServiceAccount admission plugin (envtest turns it off);
//   - the specs' images under their upstream names, pulled by cri-compose
//     from a registry on 127.0.0.1 through --registry-mirror.
var nodeConformance = os.Getenv("VK_NODE_CONFORMANCE") != ""

// What the conformance set-up made.
var (
	e2eBin      string // e2e.test
	kcmBin      string // kube-controller-manager
	schedBin    string // kube-scheduler
	agnhostBin  string
	e2eRegistry *registry.Registry
)

// nodeConformanceTools builds (or finds in the tool cache) what the
// conformance run needs beyond the control plane, one at a time: on two
// cores, parallel Kubernetes builds only fight over the CPU.
func nodeConformanceTools(ctx context.Context, toolsDir string, withE2E bool) (took time.Duration, err error) {
	type tool struct {
		path *string
		get  func() (string, time.Duration, error)
	}
	tools := []tool{
		{&kcmBin, func() (string, time.Duration, error) {
			return kubeBinary(ctx, toolsDir, "kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager")
		}},
		{&schedBin, func() (string, time.Duration, error) {
			return kubeBinary(ctx, toolsDir, "kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler")
		}},
		{&agnhostBin, func() (string, time.Duration, error) { return agnhostBinary(ctx, toolsDir) }},
	}
	if withE2E {
		tools = append(tools, tool{&e2eBin, func() (string, time.Duration, error) { return e2eTestBinary(ctx, toolsDir) }})
	}
	for _, b := range tools {
		p, t, err := b.get()
		if err != nil {
			return took, err
		}
		*b.path, took = p, took+t
	}
	return took, nil
}

// startE2ERegistry builds the specs' images, serves them from a registry
// on 127.0.0.1 and returns the cri-compose flags that mirror their
// registry to it.
func startE2ERegistry(ctx context.Context, toolsDir string) ([]string, error) {
	programs, err := critest.Build(ctx, toolcache.GoBin(), repoRoot, filepath.Join(runDir, "image-programs"))
	if err != nil {
		return nil, err
	}
	p := kubee2e.Programs{Critest: programs}
	if p.Busybox, _, err = toolcache.Busybox(ctx); err != nil {
		return nil, err
	}
	if p.Bash, err = kubee2e.BashStatic(); err != nil {
		return nil, err
	}
	if p.Agnhost, err = os.ReadFile(agnhostBin); err != nil {
		return nil, err
	}
	k8sDir, err := toolcache.Go(ctx, toolsDir, "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	if err != nil {
		return nil, err
	}
	porter := filepath.Join(k8sDir, "test", "images", "agnhost", "porter")
	if p.PorterCert, err = os.ReadFile(filepath.Join(porter, "localhost.crt")); err != nil {
		return nil, err
	}
	if p.PorterKey, err = os.ReadFile(filepath.Join(porter, "localhost.key")); err != nil {
		return nil, err
	}
	if networking { // networking_test.go
		p.CoreDNSVersion = corednsVersion
		if p.CoreDNS, err = os.ReadFile(corednsBin); err != nil {
			return nil, err
		}
	}
	imgs, err := kubee2e.Images(p)
	if err != nil {
		return nil, err
	}
	var opts []registry.Option
	if networking { // the second host's engine pulls from it too
		opts = append(opts, registry.OnAllAddresses())
	}
	if e2eRegistry, err = registry.Start(func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "vk e2e: registry: "+format+"\n", args...)
	}, opts...); err != nil {
		return nil, err
	}
	prepared.Defer(e2eRegistry.Close)
	for _, img := range imgs {
		if err := img.Push(ctx, e2eRegistry); err != nil {
			return nil, err
		}
	}
	return []string{"--registry-mirror", "registry.k8s.io=http://" + e2eRegistry.Host}, nil
}

// startKubeControllers starts kube-controller-manager and kube-scheduler
// against the running control plane, as the cluster's admin.
func startKubeControllers(kubeconfig string) error {
	api := env.ControlPlane.APIServer
	rootCA := filepath.Join(runDir, "pki", "apiserver-ca.crt")
	if err := os.WriteFile(rootCA, api.SecureServing.CA, 0o600); err != nil {
		return err
	}
	for _, c := range []struct {
		name, bin string
		args      []string
	}{
		{"kube-controller-manager", kcmBin, []string{
			"--kubeconfig", kubeconfig, "--leader-elect=false", "--secure-port=0",
			"--controllers=*", "--root-ca-file", rootCA,
			// The legacy token controller signs with the API server's
			// service account key (envtest's sa-signer).
			"--service-account-private-key-file", filepath.Join(api.CertDir, "sa-signer.key"),
			"--concurrent-namespace-syncs=10", "-v=1"}},
		{"kube-scheduler", schedBin, []string{
			"--kubeconfig", kubeconfig, "--leader-elect=false", "--secure-port=0", "-v=1"}},
	} {
		if c.name == "kube-controller-manager" && networking {
			c.args = append(c.args, clusterControllerArgs()...)
		}
		stop, err := startProcess(filepath.Join(runDir, c.name+".log"), c.bin, c.args...)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		prepared.Defer(stop)
	}
	// The framework waits for each namespace's default ServiceAccount; the
	// controller making the first one says the controllers are up.
	return suite.Poll("kube-controller-manager's first ServiceAccount", 2*time.Minute, func() (bool, string) {
		sas, err := client.CoreV1().ServiceAccounts("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(sas.Items) > 0, fmt.Sprintf("%d service accounts in default\n%s", len(sas.Items),
			tail(filepath.Join(runDir, "kube-controller-manager.log"), 20))
	})
}

// The focus and skip of a full run: SIG Node's node conformance, without
// what is serial, slow, flaky or disruptive.
const (
	nodeConformanceFocus = `\[NodeConformance\]`
	nodeConformanceSkip  = `\[Serial\]|\[Slow\]|\[Flaky\]|\[Disruptive\]`
)

// TestNodeConformance runs e2e.test's [NodeConformance] specs against
// vk-cri's node. CONFORMANCE_NODE_FLAGS adds e2e.test flags (a
// --ginkgo.focus or --ginkgo.skip of its own replaces the default one);
// --ginkgo.procs=N runs N specs at once through the ginkgo CLI. The JUnit
// report and the suite's output go to _output/conformance-node, and the
// summary ("N passed, N failed, N skipped") to its summary.txt.
func TestNodeConformance(t *testing.T) {
	if !nodeConformance {
		t.Skip("node conformance runs under VK_NODE_CONFORMANCE=1 (make conformance-node)")
	}
	need(t)
	node := "vk-cri"
	if kubeletNode {
		node = "kubelet"
	}
	runE2E(t, "conformance-node", "node conformance ("+node+" on cri-compose)", nodeConformanceFocus, nodeConformanceSkip,
		strings.Fields(os.Getenv("CONFORMANCE_NODE_FLAGS")))
}

// runE2E runs e2e.test's specs of focus and skip (extra's own --ginkgo.focus
// or --ginkgo.skip replace them) against this run's cluster, with the
// JUnit report and the suite's output in _output/<name> and the summary,
// under label, in its summary.txt. A failed spec fails t.
func runE2E(t *testing.T, name, label, focus, skip string, extra []string) {
	t.Helper()
	out := filepath.Join(repoRoot, "test", "vk", "_output", name)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	junitPath := filepath.Join(out, "junit.xml")
	ginkgo, e2e, procs := e2eArgs(extra, junitPath, focus, skip)
	e2e = append(e2e, "--kubeconfig", filepath.Join(runDir, "kubeconfig"), "--provider=skeleton",
		"--report-dir", out, "--disable-log-dump")

	cmd := exec.Command(e2eBin, append(ginkgoAsE2E(ginkgo), e2e...)...)
	if procs > 1 {
		g, _, err := ginkgoBinary()
		if err != nil {
			t.Fatal(err)
		}
		// The ginkgo CLI runs a precompiled suite only when its name ends
		// in ".test"; the tool cache's name carries the version after it.
		link := filepath.Join(runDir, "e2e.test")
		if err := os.Symlink(e2eBin, link); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		cmd = exec.Command(g, append(append(append(ginkgo, "--procs="+strconv.Itoa(procs), link), "--"), e2e...)...)
	}
	cmd.Dir = out
	logFile, err := os.Create(filepath.Join(out, "e2e.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t.Logf("running %s (output in %s)", strings.Join(cmd.Args, " "), logFile.Name())
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start).Round(time.Second)

	res, err := readJUnit(junitPath)
	if err != nil {
		t.Fatalf("e2e.test (%v, after %v): no report: %v\n%s", runErr, took, err, tail(logFile.Name(), 40))
	}
	for _, f := range res.failed {
		t.Errorf("failed: %s", f)
	}
	summary := fmt.Sprintf("%d passed, %d failed, %d skipped", res.passed, len(res.failed), res.skipped)
	report := fmt.Sprintf("%s: e2e.test in %v; JUnit in %s\n%s\n", label, took, junitPath, summary)
	if err := os.WriteFile(filepath.Join(out, "summary.txt"), []byte(report), 0o644); err != nil {
		t.Error(err)
	}
	t.Log(report)
	if runErr != nil && len(res.failed) == 0 {
		t.Errorf("e2e.test: %v with no failed spec in its report\n%s", runErr, tail(logFile.Name(), 40))
	}
}

// ginkgoBinary returns the ginkgo CLI at the version of ginkgo that
// e2e.test is built with (tools/go.mod), for parallel runs.
func ginkgoBinary() (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	toolsDir := filepath.Join(repoRoot, "test", "vk", "tools")
	v, err := toolcache.ModuleVersion(ctx, toolsDir, "github.com/onsi/ginkgo/v2")
	if err != nil {
		return "", 0, err
	}
	return toolcache.Cached(ctx, toolsDir, "ginkgo", v, "github.com/onsi/ginkgo/v2/ginkgo", "-trimpath")
}

// e2eArgs splits the run's flags into ginkgo's (as the ginkgo CLI spells
// them, without the "ginkgo." prefix) and e2e.test's own, with the default
// focus and skip unless extra sets its own, and the number of parallel
// processes (--ginkgo.procs, or 1).
func e2eArgs(extra []string, junitPath, defaultFocus, defaultSkip string) (ginkgo, e2e []string, procs int) {
	procs = 1
	focus, skip := "--focus="+defaultFocus, "--skip="+defaultSkip
	// ginkgo's own default of one hour ends a full run on this node part
	// way (each spec that fails waits out its own timeout, 5 to 10
	// minutes), and go test's -timeout bounds the whole anyway.
	timeout := "--timeout=140m"
	for i := 0; i < len(extra); i++ {
		a := extra[i]
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(name, "ginkgo.") {
			e2e = append(e2e, a)
			continue
		}
		name = strings.TrimPrefix(name, "ginkgo.")
		key, val, hasVal := strings.Cut(name, "=")
		if !hasVal && i+1 < len(extra) && !strings.HasPrefix(extra[i+1], "-") && key != "v" && key != "no-color" {
			val, hasVal = extra[i+1], true
			i++
		}
		flag := "--" + key
		if hasVal {
			flag += "=" + val
		}
		switch key {
		case "procs":
			if n, err := strconv.Atoi(val); err == nil && n > 0 {
				procs = n
			}
			continue
		case "focus":
			focus = flag
			continue
		case "skip":
			skip = flag
			continue
		case "timeout":
			timeout = flag
			continue
		}
		ginkgo = append(ginkgo, flag)
	}
	return append(ginkgo, focus, skip, timeout, "--junit-report="+junitPath, "--no-color"), e2e, procs
}

// ginkgoAsE2E spells ginkgo CLI flags as e2e.test takes them (--ginkgo.X).
func ginkgoAsE2E(flags []string) []string {
	out := make([]string, len(flags))
	for i, f := range flags {
		out[i] = "--ginkgo." + strings.TrimPrefix(f, "--")
	}
	return out
}

// junitResult counts the specs of a ginkgo JUnit report that the focus
// selected: passed, failed (by name) and skipped while running (a spec the
// focus left out is reported as skipped with no reason, and not counted).
type junitResult struct {
	passed, skipped int
	failed          []string
}

func readJUnit(path string) (junitResult, error) {
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Status  string    `xml:"status,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct {
					Message string `xml:"message,attr"`
				} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return junitResult{}, err
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return junitResult{}, fmt.Errorf("%s: %w", path, err)
	}
	var r junitResult
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			switch {
			case c.Failure != nil || c.Error != nil:
				r.failed = append(r.failed, c.Name)
			case c.Skipped != nil:
				if c.Skipped.Message != "skipped" && c.Skipped.Message != "" {
					r.skipped++
				}
			case strings.HasPrefix(c.Name, "[It]"):
				r.passed++
			}
		}
	}
	return r, nil
}
