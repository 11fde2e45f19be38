package fault

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/test/privengine"
	"github.com/cri-compose/cri-compose/test/suite"
)

// counterCmd prints "line N" ten times a second, so a gap or a repeat in
// its CRI log shows.
var counterCmd = []string{"sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.1; done"}

// checkCounter reads a counter's CRI log and checks that it holds line 0
// to line N, each once, in order, with N ≥ atLeast; it returns N.
//
// A line the engine's own log of container id lacks too may be missing:
// the engine lost it, not cri-compose. The engine reads a container's
// output from a pipe before it writes its log, and what it had read when it
// was stopped is in neither its log nor any stream it serves (seen beside
// heavy load, for a line written some 100 ms before the engine stopped).
// The test says so when it happens.
func checkCounter(t *testing.T, eng *suite.Engine, id, path string, atLeast int) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var engineHas map[int]bool // read once, at the first gap
	next := 0
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		_, rest, ok := strings.Cut(l, " stdout F line ")
		if !ok {
			t.Errorf("unexpected log line %q", l)
			continue
		}
		got, err := strconv.Atoi(rest)
		if err != nil || got < next {
			t.Fatalf("log line %q, want line %d: lost or repeated output\n%s", l, next, b)
		}
		if got > next {
			if engineHas == nil {
				engineHas = engineCounterLines(engineLog(eng, id))
			}
			if !engineHas[got] || (next > 0 && !engineHas[next-1]) {
				t.Fatalf("log line %q, want line %d; the engine's own log does not hold the lines around the gap either, so it cannot tell whose loss it is:\n%s", l, next, engineLog(eng, id))
			}
			for i := next; i < got; i++ {
				if engineHas[i] {
					t.Fatalf("log line %q, want line %d, which the engine's own log holds: lost output\n%s\nthe engine's own log of the container:\n%s", l, i, b, engineLog(eng, id))
				}
			}
			t.Logf("lines %d to %d are in neither the CRI log nor the engine's own log: the engine lost them when it stopped", next, got-1)
		}
		next = got + 1
	}
	if next-1 < atLeast {
		t.Fatalf("log ends at line %d, want at least %d", next-1, atLeast)
	}
	return next - 1
}

// engineCounterLines is the set of counter lines in the engine's log text.
func engineCounterLines(log string) map[int]bool {
	has := map[int]bool{}
	for _, l := range strings.Split(log, "\n") {
		if _, rest, ok := strings.Cut(l, "line "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil {
				has[n] = true
			}
		}
	}
	return has
}

// waitCounter waits until the counter's log reaches line n.
func waitCounter(t *testing.T, path string, n int, timeout time.Duration) {
	t.Helper()
	suite.WaitCRILog(t, path, fmt.Sprintf("stdout F line %d\n", n), timeout)
}

// TestEngineRestart: the Docker engine restarts while pods run. With
// live-restore the pods keep running and cri-compose reports them so once
// the engine is back, their CRI logs going on without a gap or a repeated
// line; without it the engine stops them, cri-compose reports them
// NOTREADY and EXITED with their whole output in the log, and kubelet's
// retry makes a working pod again. cri-compose is never restarted.
func TestEngineRestart(t *testing.T) {
	t.Parallel()
	pe := privengine.Start(t, privengine.Options{LiveRestore: true})
	k := newKube(t, pe.Host(), suite.DaemonConfig{DockerHost: pe.Host(), NetworkSubnet: pe.Subnet()})
	k.d.Start()
	pid := k.d.Pid()

	pod := k.podConfig("web", 0)
	id := k.run(pod)
	ctr := ctrConfig("counter", 0)
	ctr.Command = counterCmd
	c := k.create(id, ctr)
	k.start(c)
	logPath := filepath.Join(pod.GetLogDirectory(), "counter", "0.log")
	waitCounter(t, logPath, 5, 20*time.Second)

	// 1. Restart with live-restore: the pod runs on.
	t0 := time.Now()
	pe.Stop()
	k.d.WaitReadyIs(false, 10*time.Second)
	time.Sleep(time.Second) // the counter writes on while the engine is down
	pe.StartDaemon(true)
	k.d.WaitReadyIs(true, 30*time.Second)
	t.Logf("live-restore restart: ready again %v after the engine stopped", time.Since(t0).Round(time.Millisecond))
	if st := podState(k, id); st != runtime.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod after a live-restore restart: %v, want READY", st)
	}
	if st := ctrState(k, c); st != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after a live-restore restart: %v, want RUNNING", st)
	}
	n := checkCounter(t, k.eng, c, logPath, 5)
	waitCounter(t, logPath, n+20, 30*time.Second)
	checkCounter(t, k.eng, c, logPath, n+20)
	k.expect("after a live-restore restart", map[string][]string{id: {c}})

	// 2. Restart without live-restore: the engine stops the pod.
	pe.Stop()
	k.d.WaitReadyIs(false, 10*time.Second)
	pe.StartDaemon(false)
	k.d.WaitReadyIs(true, 30*time.Second)
	waitState(t, k, c, runtime.ContainerState_CONTAINER_EXITED, 15*time.Second)
	if st := podState(k, id); st != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("pod after a restart that stopped it: %v, want NOTREADY", st)
	}
	last := checkCounter(t, k.eng, c, logPath, n+20)
	k.expect("after a restart that stopped the pod", map[string][]string{id: {c}})
	// kubelet: stop the dead pod, run attempt 1, remove attempt 0.
	k.stopPod(id)
	id1 := k.run(k.podConfig("web", 1))
	ctr1 := ctrConfig("counter", 1) // kubelet counts restarts on: counter/1.log
	ctr1.Command = counterCmd
	c1 := k.create(id1, ctr1)
	k.start(c1)
	k.removePod(id)
	waitCounter(t, filepath.Join(k.pods[id1].GetLogDirectory(), "counter", "1.log"), 3, 20*time.Second)
	k.expect("after kubelet's retry", map[string][]string{id1: {c1}})
	if got := checkCounter(t, k.eng, c, logPath, last); got != last {
		t.Errorf("the old attempt's log grew from line %d to %d", last, got)
	}
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}
	k.teardown()
}

// engineLog is the engine's own log of container id, timestamped, or why
// it could not be read.
func engineLog(eng *suite.Engine, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := eng.ContainerLogs(ctx, id, time.Time{}, false)
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		fmt.Fprintf(&out, "(%v)", err)
	}
	return out.String()
}
