package engines_test

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cri-compose/cri-compose/test/privengine"
	"github.com/cri-compose/cri-compose/test/suite"
)

// EnvRun asks for TestSuiteOnCurrentEngine: a shell command (a go test of
// a suite) to run in a current engine's network namespace, with DOCKER_HOST
// set to it. `ENGINE=current make test-e2e` and the like set it.
const EnvRun = "CRI_COMPOSE_ENGINE_RUN"

// TestSuiteOnCurrentEngine runs the command EnvRun names, from the
// repository root, in the network namespace of a current engine started
// for it, with DOCKER_HOST naming that engine: a suite written for the
// machine's engine runs there unchanged. Its pods' addresses, ports and
// loopback services (a registry, a streaming server, an API server) are
// all inside, as they are on one host. Modules are not fetched there
// (there is no way out); the suite's go test built outside first has them.
func TestSuiteOnCurrentEngine(t *testing.T) {
	cmd := os.Getenv(EnvRun)
	if v := os.Getenv(EnvCurrent); v == "" || v == "0" || cmd == "" {
		t.Skipf("set %s=1 and %s to a command to run a suite on a current Docker Engine (ENGINE=current make test-e2e)", EnvCurrent, EnvRun)
	}
	root, err := suite.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pe := privengine.Start(t, privengine.Options{Current: true})
	pe.DefaultRoute() // a suite's API server needs one, as on the machine
	t.Logf("on dockerd %s (containerd %s): %s", pe.Binaries().DockerdVersion, pe.Binaries().ContainerdVersion, cmd)
	if err := inNamespace(t, pe, root, cmd); err != nil {
		t.Errorf("%s on the current engine: %v", cmd, err)
	}
}

// inNamespace runs a shell script (with args as its $@) in pe's network
// namespace from dir, with DOCKER_HOST naming pe and the module proxy off,
// its output passed on.
func inNamespace(t *testing.T, pe *privengine.Engine, dir, script string, args ...string) error {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=" + pe.NetNS(), "sh", "-c", script, "sh"}, args...)...)
	cmd.Dir = dir
	// No way out of the namespace: a module fetch fails at once.
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+pe.Host(), "GOPROXY=off")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// EnvConformance asks for TestConformanceCurrent (`ENGINE=current make
// conformance` sets it, with EnvCurrent): a whole critest run, many
// minutes.
const EnvConformance = "CRI_COMPOSE_CONFORMANCE"

// rroSpecs are the critest specs that need recursive read-only mounts,
// which the floor's API lacks: on a current engine each must pass, not be
// skipped.
var rroSpecs = []string{
	"should support recursive readonly mounts",
	"should reject a recursive readonly mount with PROPAGATION_HOST_TO_CONTAINER",
	"should reject a recursive readonly mount with PROPAGATION_BIDIRECTIONAL",
	"should reject a recursive readonly mount with ReadOnly: false",
}

// TestConformanceCurrent runs critest (test/conformance/run) against
// cri-compose on a current engine. The engine is private, in a network
// namespace of its own, and so is the whole run: the engine pulls from the
// run's registry on 127.0.0.1, and critest reaches the pods' ports and
// cri-compose's streaming server on loopback. What the run needs from the
// network is fetched first, outside. Flags for the runner come from
// CONFORMANCE_FLAGS, as for `make conformance`; its output goes to
// test/conformance/_output/current.
func TestConformanceCurrent(t *testing.T) {
	for _, env := range []string{EnvCurrent, EnvConformance} {
		if v := os.Getenv(env); v == "" || v == "0" {
			t.Skipf("set %s=1 and %s=1 to run critest on a current Docker Engine (ENGINE=current make conformance)", EnvCurrent, EnvConformance)
		}
	}
	root, err := suite.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	runner := filepath.Join(t.TempDir(), "conformance")
	build := exec.Command(goCmd, "build", "-o", runner, "./test/conformance/run")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the conformance runner: %v\n%s", err, out)
	}
	criCompose, err := suite.Binary("cri-compose", false)
	if err != nil {
		t.Fatal(err)
	}
	output := filepath.Join(root, "test", "conformance", "_output", "current")
	common := []string{"-repo", root, "-go", goCmd, "-cri-compose", criCompose, "-output", output}
	prep := exec.Command(runner, append(common, "-prepare")...)
	prep.Stdout, prep.Stderr = os.Stdout, os.Stderr
	if err := prep.Run(); err != nil {
		t.Fatalf("prepare the conformance run: %v", err)
	}

	pe := privengine.Start(t, privengine.Options{Current: true})
	args := append(slices.Clone(common), "-docker-host", pe.Host(), "-network-subnet", pe.Subnet())
	// Through sh, so that CONFORMANCE_FLAGS is split and unquoted as the
	// shell of make's recipe does it for the machine's engine.
	runErr := inNamespace(t, pe, root, `eval "set -- \"\$@\" $CONFORMANCE_FLAGS"; exec "$@"`, append([]string{runner}, args...)...)

	specs, err := readJUnit(filepath.Join(output, "junit.xml"))
	if err != nil {
		t.Fatalf("critest on the current engine: %v (run: %v)", err, runErr)
	}
	for _, want := range rroSpecs {
		st, ok := "", false
		for name, s := range specs {
			if strings.HasSuffix(name, want) {
				st, ok = s, true
			}
		}
		switch {
		case !ok:
			t.Errorf("critest ran no spec %q", want)
		case st != "passed":
			t.Errorf("critest spec %q on a current engine: %s, want passed", want, st)
		}
	}
	if runErr != nil {
		t.Errorf("critest on the current engine: %v (its failed specs are printed above)", runErr)
	}
}

// readJUnit returns each spec of a ginkgo JUnit report with "passed",
// "failed" or "skipped".
func readJUnit(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r struct {
		Suites []struct {
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	specs := map[string]string{}
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			switch {
			case c.Failure != nil || c.Error != nil:
				specs[c.Name] = "failed"
			case c.Skipped != nil:
				specs[c.Name] = "skipped"
			default:
				specs[c.Name] = "passed"
			}
		}
	}
	return specs, nil
}
