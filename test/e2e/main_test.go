package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/registry"
	"github.com/cri-compose/cri-compose/test/suite"
)

// What TestMain prepared for the tests.
var (
	runID    string // short random id in every name this run makes
	repoRoot string // the repository (the main module's folder)
	runDir   string // temp dir of this run: short, so socket paths fit

	engine *dockerapi.Client

	criComposeBin string // bin/cri-compose, built for this run
	crictlBin     string // from the tool cache

	// dockerConfig is a DOCKER_CONFIG holding only the compose v2 plugin;
	// composeV2Err says why there is no plugin when it is set.
	dockerConfig string
	composeV2Err error

	reg *registry.Registry

	// localImage is the busybox image loaded into the engine; regImage is
	// it on the test registry, pulled by crictl; mirrorImage is the name
	// under registry.k8s.io that the --registry-mirror leads to the test
	// registry (where it is pushed as mirrorPath).
	localImage  string
	regImage    string
	mirrorImage string

	// prepared says whether the set-up succeeded: every test skips (fails
	// in CI) or fails when it did not.
	prepared *suite.Setup
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	start := time.Now()
	cleanup := setup()
	if prepared.Ready() {
		fmt.Fprintf(os.Stderr, "e2e: run %s ready in %v (engine %s, registry %s)\n",
			runID, time.Since(start).Round(time.Millisecond), engine.Host(), reg.Host)
	}
	code := suite.Main(m)
	cleanup()
	return code
}

// need makes t skip or fail when TestMain could not prepare the run.
func need(t *testing.T) {
	t.Helper()
	prepared.Need(t)
}

// setup fills the globals and returns what undoes it. It sets
// prepared.Skip for what a developer's machine may lack (the engine,
// busybox) and prepared.Err for everything else.
func setup() (cleanup func()) {
	// The run's folder names the run and holds its pid: sweepStaleRuns
	// tells live runs from dead ones by it.
	prepared = suite.NewSetup("cce2e")
	cleanup = prepared.Cleanup
	fail := func(err error) func() { prepared.Fail(err); return cleanup }
	runID, runDir, repoRoot, engine = prepared.ID, prepared.Dir, prepared.Repo, prepared.Engine
	if !prepared.Ready() {
		return cleanup
	}
	var err error
	sweepStaleRuns(prepared.Run)

	// The busybox image: loaded into the engine for tests that need no
	// pull, pushed to the registry for those that pull.
	localImage = "localhost/cri-compose/e2e-busybox:" + runID
	var archive bytes.Buffer
	if _, err := images.BusyboxArchive(&archive, localImage); err != nil {
		if errors.Is(err, images.ErrNoBusybox) {
			prepared.Skip = err.Error()
			return cleanup
		}
		return fail(err)
	}

	// The binaries, built concurrently: cri-compose always (it is what is
	// tested), crictl and compose only on the first run on this machine.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var (
		wg                      sync.WaitGroup
		buildErr, crictlErr     error
		composeBin              string
		crictlTook, composeTook time.Duration
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		criComposeBin, buildErr = suite.Binary("cri-compose", suite.RaceEnabled)
	}()
	go func() {
		defer wg.Done()
		crictlBin, crictlTook, crictlErr = buildCrictl(ctx)
	}()
	go func() {
		defer wg.Done()
		composeBin, composeTook, composeV2Err = buildCompose(ctx)
	}()

	// Meanwhile: the image and the registry.
	ictx, icancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer icancel()
	if err := engine.ImageLoad(ictx, bytes.NewReader(archive.Bytes())); err != nil {
		wg.Wait()
		return fail(fmt.Errorf("load %s: %w", localImage, err))
	}
	prepared.Defer(func() { removeImage(localImage) })
	if reg, err = registry.Start(func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "e2e: test "+format+"\n", args...)
	}); err != nil {
		wg.Wait()
		return fail(fmt.Errorf("test registry: %w", err))
	}
	prepared.Defer(reg.Close)
	const mirrorRegistry = "registry.k8s.io"
	regPath := "e2e-" + runID + "/busybox:1.0"
	mirrorPath := "e2e-" + runID + "/mirrored/busybox:1.0"
	regImage = reg.Host + "/" + regPath
	mirrorImage = mirrorRegistry + "/" + mirrorPath
	if err := reg.PushArchive(ictx, archive.Bytes(), regPath, mirrorPath); err != nil {
		wg.Wait()
		return fail(err)
	}
	// crictl pulls them into the engine: remove what it may have left.
	prepared.Defer(func() {
		removeImage(regImage)
		removeImage(mirrorImage)
		removeImage(reg.Host + "/" + mirrorPath)
	})

	wg.Wait()
	if buildErr != nil {
		return fail(fmt.Errorf("build cri-compose: %w", buildErr))
	}
	if crictlErr != nil {
		return fail(fmt.Errorf("crictl: %w", crictlErr))
	}
	if crictlTook > 0 {
		fmt.Fprintf(os.Stderr, "e2e: built %s in %v (cached for later runs)\n", crictlBin, crictlTook.Round(time.Millisecond))
	}
	dockerConfig = filepath.Join(runDir, "docker-config")
	if err := os.MkdirAll(dockerConfig, 0o700); err != nil {
		return fail(err)
	}
	if composeV2Err == nil {
		if composeTook > 0 {
			fmt.Fprintf(os.Stderr, "e2e: built %s in %v (cached for later runs)\n", composeBin, composeTook.Round(time.Millisecond))
		}
		if _, err := exec.LookPath("docker"); err != nil {
			composeV2Err = fmt.Errorf("no docker CLI to run the compose plugin: %w", err)
		} else if v, err := installComposePlugin(ctx, dockerConfig, composeBin); err != nil {
			composeV2Err = err
		} else {
			fmt.Fprintf(os.Stderr, "e2e: docker compose %s installed as a plugin in DOCKER_CONFIG=%s\n", v, dockerConfig)
		}
	}
	if composeV2Err != nil {
		fmt.Fprintf(os.Stderr, "e2e: no docker compose v2: %v\n", composeV2Err)
	}
	return cleanup
}

// removeImage untags ref in the engine (the image goes when its last name
// does); missing is fine.
func removeImage(ref string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := engine.ImageRemove(ctx, ref, false); err != nil && !dockerapi.IsNotFound(err) {
		fmt.Fprintf(os.Stderr, "e2e: cleanup: remove image %s: %v\n", ref, err)
	}
}

// daemonNames are the names tests give newDaemon: each daemon's network is
// cce2e-<run>-<name>, which sweepStaleRuns removes for runs that died.
var daemonNames = []string{"life", "exit", "one", "two", "export", "flood", "steady", "long", "last"}

var e2eNamespace = regexp.MustCompile(`^e2e-([0-9a-f]{8})-[a-z]+$`)

// sweepStaleRuns removes what earlier runs that died before their cleanup
// (killed, timed out) left behind: their pods' containers, which would run
// forever, their networks, images and temp dirs.
func sweepStaleRuns(run *suite.Run) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctrs, err := engine.ContainerList(ctx, "io.kubernetes.pod.namespace")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: sweep: %v\n", err)
		return
	}
	stale := map[string]bool{}
	for _, id := range run.SweepDirs() {
		stale[id] = true
	}
	for _, c := range ctrs {
		m := e2eNamespace.FindStringSubmatch(c.Labels["io.kubernetes.pod.namespace"])
		if m == nil || run.Alive(m[1]) {
			continue
		}
		stale[m[1]] = true
		if err := engine.ContainerRemove(ctx, c.ID); err != nil && !dockerapi.IsNotFound(err) {
			fmt.Fprintf(os.Stderr, "e2e: sweep: remove container %s: %v\n", c.ID[:12], err)
		}
	}
	for id := range stale {
		fmt.Fprintf(os.Stderr, "e2e: removed what the dead run %s left behind\n", id)
		for _, n := range daemonNames {
			if err := engine.NetworkRemove(ctx, "cce2e-"+id+"-"+n); err != nil && !dockerapi.IsNotFound(err) {
				fmt.Fprintf(os.Stderr, "e2e: sweep: remove network: %v\n", err)
			}
		}
		removeImage("localhost/cri-compose/e2e-busybox:" + id)
		for _, pattern := range []string{"*/e2e-" + id + "/busybox", "*/e2e-" + id + "/mirrored/busybox"} {
			imgs, _ := engine.ImageList(ctx, pattern)
			for _, img := range imgs {
				for _, tag := range img.RepoTags {
					if strings.Contains(tag, "/e2e-"+id+"/") {
						removeImage(tag)
					}
				}
			}
		}
	}
}
