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

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/suite"
)

// fastCounterCmd prints "line N" fifty times a second.
var fastCounterCmd = []string{"sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.02; done"}

// counterLines reads a counter's CRI log, checks that every line is one
// whole record, and returns the numbers printed, in order.
func counterLines(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("%s ends in a torn record: %q", path, b[max(0, len(b)-80):])
	}
	var out []int
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		r, err := crilog.ParseLine([]byte(l))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(string(r.Content), "line "))
		if err != nil || r.Partial {
			t.Errorf("%s: unexpected record %q", path, l)
			continue
		}
		out = append(out, n)
	}
	return out
}

func (k *kube) metric(name string) float64 {
	k.t.Helper()
	v, err := k.d.Metric(name)
	if err != nil {
		k.t.Fatal(err)
	}
	return v
}

// TestLogDiskFull: a pod's log directory is on a small filesystem that
// fills. Its container runs on, cri-compose does not crash or stall
// (another pod's log, on another filesystem, keeps growing; RPCs answer at
// once), the lines that found no room are counted
// (cri_compose_log_dropped_lines_total) and logged once for the
// container, not once a line, and the log takes lines again by itself
// once there is room, every line in it whole.
func TestLogDiskFull(t *testing.T) {
	t.Parallel()
	k := newKube(t, "", suite.DaemonConfig{Metrics: true})
	full, calm := k.podConfig("full", 0), k.podConfig("calm", 0)
	suite.Tmpfs(t, full.GetLogDirectory(), "4m")
	k.d.Start()
	pid := k.d.Pid()
	counter := func(pod *runtime.PodSandboxConfig) (string, string, string) {
		id := k.run(pod)
		cfg := ctrConfig("counter", 0)
		cfg.Command = fastCounterCmd
		c := k.create(id, cfg)
		k.start(c)
		return id, c, filepath.Join(pod.GetLogDirectory(), "counter", "0.log")
	}
	fullPod, fullCtr, fullLog := counter(full)
	calmPod, calmCtr, calmLog := counter(calm)
	waitCounter(t, fullLog, 5, 20*time.Second)

	filler := filepath.Join(full.GetLogDirectory(), "filler")
	suite.FillDisk(t, filler)
	filledAt := time.Now()
	calmBefore := len(counterLines(t, calmLog))
	// Lines go on filling the last block of the file, then are dropped.
	suite.Eventually(t, "20 lines dropped", 20*time.Second, func() (bool, string) {
		n := k.metric("cri_compose_log_dropped_lines_total")
		return n >= 20, fmt.Sprintf("%v dropped", n)
	})
	t.Logf("20 lines dropped %v after the disk filled", time.Since(filledAt).Round(time.Millisecond))
	before := counterLines(t, fullLog)
	if len(before) == 0 {
		t.Fatal("the log is empty")
	}

	// Meanwhile: the container runs, the other pod's log grows, RPCs
	// answer at once, cri-compose is the same process.
	if st := ctrState(k, fullCtr); st != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the container whose log is full: %v, want RUNNING", st)
	}
	suite.Eventually(t, "the other pod's log grown by 20 lines", 10*time.Second, func() (bool, string) {
		n := len(counterLines(t, calmLog))
		return n >= calmBefore+20, fmt.Sprintf("%d lines, %d before", n, calmBefore)
	})
	ctx, cancel := context.WithTimeout(k.ctx, 5*time.Second)
	defer cancel()
	t0 := time.Now()
	if _, err := k.d.RT.ListContainers(ctx, &runtime.ListContainersRequest{}); err != nil {
		t.Errorf("ListContainers with a log disk full: %v", err)
	}
	if _, err := k.d.RT.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: fullCtr}); err != nil {
		t.Errorf("ContainerStatus with its log disk full: %v", err)
	}
	r, err := k.d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: fullCtr, Cmd: []string{"echo", "still here"}, Timeout: 5})
	if err != nil || string(r.GetStdout()) != "still here\n" {
		t.Errorf("ExecSync in the container whose log is full: %v, %q", err, r.GetStdout())
	}
	t.Logf("ListContainers, ContainerStatus and ExecSync with a log disk full: %v", time.Since(t0).Round(time.Millisecond))
	if k.d.Pid() != pid {
		t.Fatalf("cri-compose was restarted (pid %d, now %d)", pid, k.d.Pid())
	}

	// Room again: new lines come, by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freedAt := time.Now()
	var after []int
	suite.Eventually(t, "new lines in the log once there is room", 15*time.Second, func() (bool, string) {
		after = counterLines(t, fullLog)
		return len(after) >= len(before)+5, fmt.Sprintf("%d lines, %d before", len(after), len(before))
	})
	t.Logf("the log took lines again %v after room was made", time.Since(freedAt).Round(time.Millisecond))
	dropped := k.metric("cri_compose_log_dropped_lines_total")
	// One gap, exactly as long as the lines counted dropped.
	gap := 0
	for i := 1; i < len(after); i++ {
		switch d := after[i] - after[i-1]; {
		case d == 1:
		case d > 1 && gap == 0:
			gap = d - 1
		default:
			t.Errorf("log line %d: %d after %d (a second gap or a repeat)", i, after[i], after[i-1])
		}
	}
	if float64(gap) != dropped || gap == 0 {
		t.Errorf("the log lacks %d lines, cri_compose_log_dropped_lines_total is %v", gap, dropped)
	}
	t.Logf("%d lines dropped while the disk was full (line %d to %d)", gap, before[len(before)-1]+1, before[len(before)-1]+gap)

	log := k.d.Log()
	if n := strings.Count(log, "filesystem is full"); n != 1 || !strings.Contains(log, fullLog) {
		t.Errorf("cri-compose said %d times that a log's filesystem is full, want once, naming %s", n, fullLog)
	}
	if !strings.Contains(log, fmt.Sprintf("droppedLines=%d", gap)) {
		t.Errorf("cri-compose's log does not say the log takes lines again after dropping %d", gap)
	}
	if st := ctrState(k, calmCtr); st != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the other container: %v, want RUNNING", st)
	}
	k.expect("after the disk had room again", map[string][]string{fullPod: {fullCtr}, calmPod: {calmCtr}})
	k.teardown()
}

// TestStateDirFull: the state dir is on a small filesystem that fills.
// RunPodSandbox (with a resolv.conf to write, and without) and
// CreateContainer fail with ResourceExhausted naming the file they could
// not write, and leave nothing behind: no container on the engine, no
// project folder, no other network, the compose file as it was. Once
// there is room they work again.
func TestStateDirFull(t *testing.T) {
	t.Parallel()
	k := newKube(t, "", suite.DaemonConfig{})
	suite.Tmpfs(t, k.d.StateDir, "4m")
	k.d.Start()
	id, ctrs := k.runWith(k.podConfig("before", 0), "app")
	want := map[string][]string{id: ctrs}
	composeFile := filepath.Join(k.d.StateDir, "projects", sandbox.ProjectName(k.pods[id].GetMetadata()), "compose.yaml")
	compose, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(k.d.StateDir, "filler")
	suite.FillDisk(t, filler)
	ctx, cancel := context.WithTimeout(k.ctx, 30*time.Second)
	defer cancel()
	wantFull := func(what string, err error) {
		t.Helper()
		if c := status.Code(err); c != codes.ResourceExhausted || !strings.Contains(err.Error(), k.d.StateDir) {
			t.Errorf("%s with the state dir full: %v (%v), want ResourceExhausted naming the file under %s", what, c, err, k.d.StateDir)
		} else {
			t.Logf("%s: %v", what, status.Convert(err).Message())
		}
	}
	withDNS := k.podConfig("dns", 0)
	_, err = k.d.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: withDNS})
	wantFull("RunPodSandbox", err)
	noDNS := k.podConfig("nodns", 0)
	noDNS.DnsConfig = nil
	_, err = k.d.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: noDNS})
	wantFull("RunPodSandbox without DNS config", err)
	_, err = k.d.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: id, Config: ctrConfig("more", 0), SandboxConfig: k.pods[id]})
	wantFull("CreateContainer", err)
	k.expect("after the calls that found the state dir full", want)
	if b, err := os.ReadFile(composeFile); err != nil || string(b) != string(compose) {
		t.Errorf("the pod's compose file changed (%v):\n%s", err, b)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(composeFile), "*.tmp")); len(left) > 0 {
		t.Errorf("files left in the project folder: %v", left)
	}

	// Room again: the same calls work.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c := k.create(id, ctrConfig("more", 0))
	k.start(c)
	want[id] = append(want[id], c)
	id2 := k.run(withDNS)
	id3 := k.run(noDNS)
	want[id2], want[id3] = nil, nil
	k.expect("after room was made", want)
	k.teardown()
}
