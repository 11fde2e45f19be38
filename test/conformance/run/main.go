// Command run runs critest, cri-tools' CRI validation suite, against
// cri-compose on this machine's Docker Engine, and prints
// "N passed, N failed, N skipped" on its last line. `make conformance` runs
// it (after building bin/cri-compose); by hand, from the repository root:
//
//	go run ./test/conformance/run [-v] [-parallel N] [-focus REGEXP] [-skip REGEXP]
//
// With -docker-host it tests cri-compose on another engine. One in a
// network namespace of its own (as a private engine in tests is) must have
// the whole run in that namespace too, as the engine pulls from the run's
// registry on 127.0.0.1 and critest reaches cri-compose's streaming server
// and the pods' ports: run it with -prepare first, in a namespace with a
// way out, to fetch what the run needs from the network, then the run itself
// inside (`nsenter --net=...`). `ENGINE=current make conformance` does so.
//
// A run:
//
//  1. builds critest (`go test -c sigs.k8s.io/cri-tools/cmd/critest`) and the
//     ginkgo CLI from the module test/conformance/tools, once: the binaries
//     are cached in os.UserCacheDir()/cri-compose/tools/<name>-<version>;
//  2. builds the images critest needs under their upstream names
//     (test/images/critest, with its static programs built here with
//     CGO_ENABLED=0, and as their sh the busybox of Debian's package busybox,
//     fetched once with apt-get download and cached beside the tools) and
//     pushes them to a registry served in this process on 127.0.0.1, after
//     removing those names from the engine so that the pull specs really
//     pull;
//  3. starts cri-compose with its own socket, state dir and pod network, and
//     --registry-mirror for registry.k8s.io, gcr.io and k8s.gcr.io pointing
//     at that registry;
//  4. runs critest, skipping only what this host cannot run (see hostSkips),
//     with its JUnit report in OUTPUT/junit.xml and its output in
//     OUTPUT/critest.log (OUTPUT is test/conformance/_output);
//  5. stops cri-compose and removes everything the run made: containers, the
//     pod network, the images, the state dir and critest's temp files. Also
//     on failure, and on SIGINT or SIGTERM (a second one ends the run at
//     once);
//  6. prints the failed specs, each with its failure message on one line,
//     and last, alone on its line, the summary counted from the JUnit report.
//
// It exits 0 when no spec failed, 1 when some did, 2 when the run itself
// could not be done.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images/critest"
	"github.com/cri-compose/cri-compose/test/registry"
	"github.com/cri-compose/cri-compose/test/suite"
)

// hostSkips are the specs this harness never runs, and why. critest itself
// adds "benchmark" (the benchmarks are not validation specs).
var hostSkips = []struct {
	re, why string
	when    func() bool // nil: always
}{
	{re: `\[k8s\.io\] NRI `, why: "NRI specs need an NRI socket (-nri-socket); cri-compose has no NRI"},
	{re: `\[k8s\.io\] AppArmor `, why: "AppArmor is disabled on this host", when: func() bool { return !appArmorEnabled() }},
	{re: `public image with digest should be pulled and removed`, why: "its image, " + critest.DigestImage + ", cannot be made offline"},
}

// webPorts are the host ports critest's networking and port-forward specs
// bind.
var webPorts = []int{12000, 12001, 12002, 12003}

var (
	flagRepo     = flag.String("repo", "", "root of the cri-compose repository (default: found from the working directory)")
	flagBinary   = flag.String("cri-compose", "", "cri-compose binary to test (default REPO/bin/cri-compose)")
	flagOutput   = flag.String("output", "", "folder for junit.xml, critest.log and cri-compose.log (default REPO/test/conformance/_output)")
	flagGo       = flag.String("go", "go", "go command that builds the tools and the images' programs")
	flagParallel = flag.Int("parallel", 1, "critest -parallel: number of ginkgo nodes ([Serial] specs still run alone)")
	flagFocus    = flag.String("focus", "", "run only the specs matching this regexp")
	flagSkip     = flag.String("skip", "", "also skip the specs matching this regexp")
	flagVerbose  = flag.Bool("v", false, "critest -ginkgo.v: report every spec and its steps, not only failures")
	flagCRIv     = flag.Int("cri-compose-v", 2, "log level (-v) of cri-compose; its log is OUTPUT/cri-compose.log")
	flagTimeout  = flag.Duration("timeout", time.Hour, "critest's suite timeout")
	flagHost     = flag.String("docker-host", "", "engine endpoint for cri-compose and the clean-up (default: $DOCKER_HOST or the local socket)")
	flagSubnet   = flag.String("network-subnet", "", "cri-compose --network-subnet of the run's pod network (default: the engine picks)")
	flagPrepare  = flag.Bool("prepare", false, "only build or fetch what a run needs from the network (critest, ginkgo, Debian's busybox), then exit")
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "conformance: "+format+"\n", args...)
}

func main() {
	flag.Parse()
	start := time.Now()
	res, status := run()
	logf("done in %s", time.Since(start).Round(time.Second))
	if res != nil {
		// Last, after the clean-up's messages.
		res.print(os.Stdout)
	}
	os.Exit(status)
}

// run does the whole run, cleans up, and returns critest's result (nil
// when there is none) and the exit status.
func run() (_ *result, status int) {
	// A closed stdout (a pager quit early) must not end the run before
	// its clean-up: writes then just fail.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	go func() {
		<-ctx.Done()
		stopSignals() // from the first signal on, a second one ends the run at once
	}()

	// Everything made is undone in reverse order, whatever happens.
	var undo []func()
	defer func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	fail := func(format string, args ...any) (*result, int) {
		logf("error: "+format, args...)
		return nil, 2
	}

	repo, err := repoRoot(*flagRepo)
	if err != nil {
		return fail("%v", err)
	}
	binary := *flagBinary
	if binary == "" {
		binary = filepath.Join(repo, "bin", "cri-compose")
	}
	if binary, err = filepath.Abs(binary); err != nil {
		return fail("%v", err)
	}
	if _, err := os.Stat(binary); err != nil {
		return fail("cri-compose binary: %v (make build makes it)", err)
	}
	output := *flagOutput
	if output == "" {
		output = filepath.Join(repo, "test", "conformance", "_output")
	}
	if err := os.MkdirAll(output, 0o755); err != nil {
		return fail("%v", err)
	}
	junitPath := filepath.Join(output, "junit.xml")
	for _, f := range []string{"junit.xml", "critest.log", "cri-compose.log", "test-images.yaml"} {
		_ = os.Remove(filepath.Join(output, f))
	}

	// 1. The tools.
	toolsDir := filepath.Join(repo, "test", "conformance", "tools")
	critestBin, err := critestTool.ensure(ctx, *flagGo, toolsDir)
	if err != nil {
		return fail("%v", err)
	}
	ginkgoBin, err := ginkgoTool.ensure(ctx, *flagGo, toolsDir)
	if err != nil {
		return fail("%v", err)
	}
	if *flagPrepare {
		if _, err := dynamicBusybox(ctx); err != nil {
			logf("warning: %v: the images' sh will be busybox-static's, so the MaskedPaths spec fails", err)
		}
		logf("prepared: %s, %s", critestBin, ginkgoBin)
		return nil, 0
	}

	d, err := dockerapi.New(*flagHost)
	if err != nil {
		return fail("engine: %v", err)
	}
	defer d.Close()
	if _, err := d.Ping(ctx); err != nil {
		return fail("engine: %v (bash hack/ensure-docker.sh starts one)", err)
	}

	// Scratch space: the state dir, the socket, the images' programs.
	work, err := os.MkdirTemp("", "cri-compose-conformance-")
	if err != nil {
		return fail("%v", err)
	}
	undo = append(undo, func() {
		if err := suite.RemoveTree(work); err != nil {
			logf("remove %s: %v", work, err)
		}
	})
	stateDir := filepath.Join(work, "state")
	socket := filepath.Join(work, "cri.sock")
	endpoint := "unix://" + socket
	network := filepath.Base(work) // cri-compose-conformance-NNN, like the folder

	// 2. The images and the registry.
	t0 := time.Now()
	progs, err := critest.Build(ctx, *flagGo, repo, filepath.Join(work, "programs"))
	if err != nil {
		return fail("%v", err)
	}
	if path, err := dynamicBusybox(ctx); err != nil {
		logf("warning: %v: the images' sh stays busybox-static's, so the MaskedPaths spec fails", err)
	} else if progs.Shell, err = critest.LoadShell(path); err != nil {
		logf("warning: %v: the images' sh stays busybox-static's, so the MaskedPaths spec fails", err)
	}
	imgs, err := critest.Images(progs)
	if err != nil {
		return fail("%v", err)
	}
	var names []string
	for _, img := range imgs {
		names = append(names, img.Refs...)
	}
	reg, err := registry.Start(logf)
	if err != nil {
		return fail("%v", err)
	}
	undo = append(undo, reg.Close)
	for _, img := range imgs {
		if err := img.Push(ctx, reg); err != nil {
			return fail("%v", err)
		}
	}
	logf("registry: %d images (%d names) on %s, made in %s", len(imgs), len(names), reg.Host, time.Since(t0).Round(100*time.Millisecond))
	removeNames(ctx, d, names)
	undo = append(undo, func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		removeNames(cctx, d, names)
		removeRegistryImages(cctx, d, reg.Host)
	})
	for _, p := range webPorts {
		if l, err := net.Listen("tcp", fmt.Sprintf(":%d", p)); err != nil {
			logf("warning: host port %d is taken (%v): the specs that bind it will fail", p, err)
		} else {
			l.Close()
		}
	}

	// 3. cri-compose.
	undo = append(undo, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		removeContainers(cctx, d, stateDir, network)
		removeNetwork(cctx, d, network)
	})
	mirror := "http://" + reg.Host
	criArgs := []string{
		"--listen", endpoint,
		"--state-dir", stateDir,
		"--network", network,
		"--registry-mirror", "registry.k8s.io=" + mirror,
		"--registry-mirror", "gcr.io=" + mirror,
		"--registry-mirror", "k8s.gcr.io=" + mirror,
		fmt.Sprintf("-v=%d", *flagCRIv),
	}
	if *flagHost != "" {
		criArgs = append(criArgs, "--docker-host", *flagHost)
	}
	if *flagSubnet != "" {
		criArgs = append(criArgs, "--network-subnet", *flagSubnet)
	}
	criLog, err := os.Create(filepath.Join(output, "cri-compose.log"))
	if err != nil {
		return fail("%v", err)
	}
	defer criLog.Close()
	cri := exec.Command(binary, criArgs...)
	cri.Stdout, cri.Stderr = criLog, criLog
	cri.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	logf("cri-compose: %s %s", binary, strings.Join(criArgs, " "))
	if err := cri.Start(); err != nil {
		return fail("start cri-compose: %v", err)
	}
	criDone := make(chan error, 1)
	go func() { criDone <- cri.Wait() }()
	undo = append(undo, func() { stopProcess("cri-compose", cri.Process, criDone, syscall.SIGTERM, 20*time.Second) })
	if err := waitCRI(ctx, endpoint, criDone); err != nil {
		return fail("cri-compose: %v; its log: %s", err, criLog.Name())
	}

	// 4. critest.
	imagesFile := filepath.Join(output, "test-images.yaml")
	if err := os.WriteFile(imagesFile, []byte(fmt.Sprintf("defaultTestContainerImage: %s\nwebServerTestImage: %s\n",
		critest.Busybox, critest.Nginx)), 0o644); err != nil {
		return fail("%v", err)
	}
	binDir := filepath.Join(work, "bin") // ginkgo, for -parallel
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return fail("%v", err)
	}
	if err := os.Symlink(ginkgoBin, filepath.Join(binDir, "ginkgo")); err != nil {
		return fail("%v", err)
	}
	args := []string{
		"-runtime-endpoint=" + endpoint,
		"-image-endpoint=" + endpoint,
		"-test-images-file=" + imagesFile,
		"-ginkgo.junit-report=" + junitPath,
		"-ginkgo.no-color",
		"-ginkgo.timeout=" + flagTimeout.String(),
	}
	if *flagParallel > 1 {
		// Not with 1: ginkgo takes -parallel=1 for go test's and refuses it.
		args = append(args, fmt.Sprintf("-parallel=%d", *flagParallel))
	}
	for _, s := range hostSkips {
		if s.when == nil || s.when() {
			args = append(args, "-ginkgo.skip="+s.re)
			logf("skipping /%s/: %s", s.re, s.why)
		}
	}
	if *flagVerbose {
		args = append(args, "-ginkgo.v")
	}
	if *flagSkip != "" {
		args = append(args, "-ginkgo.skip="+*flagSkip)
	}
	if *flagFocus != "" {
		args = append(args, "-ginkgo.focus="+*flagFocus)
	}
	critestLog, err := os.Create(filepath.Join(output, "critest.log"))
	if err != nil {
		return fail("%v", err)
	}
	defer critestLog.Close()
	// critest's temp files (pod log dirs, host paths, seccomp profiles, the
	// link -parallel runs) go to work, removed at the end: it leaves some.
	tmpDir := filepath.Join(work, "tmp")
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return fail("%v", err)
	}
	ct := exec.Command(critestBin, args...)
	ct.Dir = work
	ct.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+tmpDir)
	ct.Stdout = io.MultiWriter(critestLog, &bestEffort{w: os.Stdout})
	ct.Stderr = ct.Stdout
	ct.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf("critest: %s %s", critestBin, strings.Join(args, " "))
	logf("critest: output in %s", critestLog.Name())
	t1 := time.Now()
	if err := ct.Start(); err != nil {
		return fail("start critest: %v", err)
	}
	ctDone := make(chan error, 1)
	go func() { ctDone <- ct.Wait() }()
	var ctErr error
	select {
	case ctErr = <-ctDone:
	case <-ctx.Done():
		logf("interrupted: stopping critest (it cleans up its pods first)")
		stopProcess("critest", ct.Process, ctDone, syscall.SIGINT, 2*time.Minute)
		ctErr = errors.New("interrupted")
	}
	logf("critest: ran in %s (%v)", time.Since(t1).Round(time.Second), exitText(ctErr))

	// 5. The result.
	res, err := parseJUnit(junitPath)
	if err != nil {
		return fail("critest left no usable JUnit report: %v; see %s", err, critestLog.Name())
	}
	res.files = []string{"JUnit: " + junitPath, "critest log: " + critestLog.Name(), "cri-compose log: " + criLog.Name()}
	if res.failed > 0 || ctx.Err() != nil {
		return &res, 1
	}
	if ctErr != nil {
		logf("critest failed although its report has no failed spec: %v", ctErr)
		return &res, 1
	}
	return &res, 0
}

// repoRoot returns dir, or the nearest folder from the working directory
// upwards whose go.mod is cri-compose's.
func repoRoot(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/cri-compose/cri-compose\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no cri-compose repository around %s: give -repo", wd)
		}
	}
}

// waitCRI waits until the CRI at endpoint answers Version, or the process
// behind it exits.
func waitCRI(ctx context.Context, endpoint string, exited <-chan error) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := rs.Version(cctx, &runtimeapi.VersionRequest{})
		cancel()
		if err == nil {
			logf("cri-compose: answers on %s: %s %s (CRI %s)", endpoint, v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeApiVersion())
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited before serving: %v", exitText(err))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s after a minute: %v", endpoint, err)
		}
	}
}

// stopProcess sends sig to p's process group (p leads one) and waits up to
// grace for done, then kills the group.
func stopProcess(name string, p *os.Process, done <-chan error, sig syscall.Signal, grace time.Duration) {
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-p.Pid, sig)
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	logf("%s: still running after %s, killing it", name, grace)
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	<-done
}

// bestEffort passes writes on until one fails, then drops them, so that a
// closed console never stalls critest, whose output also goes to its log.
type bestEffort struct {
	w      io.Writer
	failed bool
}

func (b *bestEffort) Write(p []byte) (int, error) {
	if !b.failed {
		if _, err := b.w.Write(p); err != nil {
			b.failed = true
		}
	}
	return len(p), nil
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func appArmorEnabled() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && len(b) > 0 && b[0] == 'Y'
}
