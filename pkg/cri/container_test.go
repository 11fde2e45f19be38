package cri_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/suite"
)

// TestContainerExit runs containers to their end: a failing one (exit 3,
// output on both streams) and a succeeding one, and checks their status and
// CRI log files.
func TestContainerExit(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("exit")
	podID := e.runPod(pod)

	failCfg := ctrConfig("fail", "echo hello; echo oops >&2; exit 3")
	before := time.Now()
	failID := e.createCtr(podID, pod, failCfg)
	if st := e.ctrStatus(failID); st.GetState() != runtime.ContainerState_CONTAINER_CREATED ||
		st.GetStartedAt() != 0 || st.GetFinishedAt() != 0 || st.GetCreatedAt() == 0 {
		t.Errorf("created container: state %s created %d started %d finished %d",
			st.GetState(), st.GetCreatedAt(), st.GetStartedAt(), st.GetFinishedAt())
	}
	okID := e.createCtr(podID, pod, ctrConfig("ok", "echo fine"))
	e.startCtr(failID)
	e.startCtr(okID)

	st := e.waitCtrState(failID, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)
	if st.GetExitCode() != 3 || st.GetReason() != "Error" {
		t.Errorf("exit code %d reason %q, want 3 Error", st.GetExitCode(), st.GetReason())
	}
	created, started, finished := st.GetCreatedAt(), st.GetStartedAt(), st.GetFinishedAt()
	if created < before.Add(-time.Second).UnixNano() || started < created || finished < started || finished > time.Now().UnixNano() {
		t.Errorf("times: created %d started %d finished %d (test began %d)", created, started, finished, before.UnixNano())
	}
	if st.GetImage().GetImage() == "" || st.GetImage().GetUserSpecifiedImage() != testImage {
		t.Errorf("image %v, want one naming %s", st.GetImage(), testImage)
	}
	if !strings.HasPrefix(st.GetImageRef(), "sha256:") || st.GetImageId() != st.GetImageRef() {
		t.Errorf("image_ref %q image_id %q, want the image id", st.GetImageRef(), st.GetImageId())
	}
	if st.GetMetadata().GetName() != "fail" || st.GetLabels()["ctr"] != "fail" || st.GetAnnotations()["cri-compose.test/ctr"] != "fail" {
		t.Errorf("metadata %v labels %v annotations %v", st.GetMetadata(), st.GetLabels(), st.GetAnnotations())
	}
	wantLog := filepath.Join(pod.GetLogDirectory(), "fail.log")
	if st.GetLogPath() != wantLog {
		t.Errorf("log_path %q, want %q", st.GetLogPath(), wantLog)
	}
	// EXITED is reported once the container's output is in its log file.
	recs := readLog(t, wantLog)
	lines := logLines(recs)
	if !slices.Contains(lines, "stdout F hello") || !slices.Contains(lines, "stderr F oops") || len(lines) != 2 {
		t.Errorf("log file %s: %q, want [stdout F hello, stderr F oops]", wantLog, lines)
	}
	for _, r := range recs {
		if r.Time.UnixNano() < started-int64(time.Second) || r.Time.UnixNano() > finished+int64(time.Second) {
			t.Errorf("log record at %v is outside the run %v..%v", r.Time, time.Unix(0, started), time.Unix(0, finished))
		}
	}

	st = e.waitCtrState(okID, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)
	if st.GetExitCode() != 0 || st.GetReason() != "Completed" || st.GetFinishedAt() == 0 {
		t.Errorf("exit code %d reason %q finished %d, want 0 Completed", st.GetExitCode(), st.GetReason(), st.GetFinishedAt())
	}
	if lines := logLines(readLog(t, st.GetLogPath())); !slices.Equal(lines, []string{"stdout F fine"}) {
		t.Errorf("log of ok: %q", lines)
	}

	// Quick containers: the exit can reach the server before StartContainer
	// returns; EXITED must still mean the output is in the log file.
	var quick []string
	for i := range 6 {
		quick = append(quick, e.createCtr(podID, pod, ctrConfig(fmt.Sprintf("quick%d", i), "echo q; exit 1")))
	}
	for _, id := range quick {
		e.startCtr(id)
	}
	for _, id := range quick {
		st := e.waitCtrState(id, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)
		if lines := logLines(readLog(t, st.GetLogPath())); !slices.Equal(lines, []string{"stdout F q"}) {
			t.Errorf("%s is EXITED with log %q", st.GetMetadata().GetName(), lines)
		}
		if st.GetFinishedAt() < st.GetStartedAt() {
			t.Errorf("%s finished at %d, before it started at %d", st.GetMetadata().GetName(), st.GetFinishedAt(), st.GetStartedAt())
		}
	}

	// The pod lists its containers in its status.
	ps, err := e.rt().PodSandboxStatus(e.ctx(), &runtime.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ps.GetContainersStatuses()); n != 2+len(quick) {
		t.Errorf("pod status lists %d containers, want %d", n, 2+len(quick))
	}

	// An exited container can't be started again, and it can be removed.
	_, err = e.rt().StartContainer(e.ctx(), &runtime.StartContainerRequest{ContainerId: failID})
	wantCode(t, err, codes.FailedPrecondition)
	if _, err := e.rt().RemoveContainer(e.ctx(), &runtime.RemoveContainerRequest{ContainerId: failID}); err != nil {
		t.Fatalf("RemoveContainer: %v", err)
	}
	_, err = e.rt().ContainerStatus(e.ctx(), &runtime.ContainerStatusRequest{ContainerId: failID})
	wantCode(t, err, codes.NotFound)
	list := e.engineCtrs(sandbox.LabelSandboxID + "=" + podID)
	if len(list) != 1+len(quick) || slices.ContainsFunc(list, func(c container.Summary) bool { return c.ID == failID }) {
		t.Errorf("after RemoveContainer the engine holds %d containers of the pod, want %d without the removed one", len(list), 1+len(quick))
	}
	// kubelet owns the log file: it stays.
	if lines := logLines(readLog(t, wantLog)); len(lines) != 2 {
		t.Errorf("log file after removal: %q", lines)
	}
}

// TestListContainersFilters checks the id prefix, state, label selector and
// pod sandbox id filters.
func TestListContainersFilters(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	podA, podB := e.podConfig("lca"), e.podConfig("lcb")
	aID, bID := e.runPod(podA), e.runPod(podB)
	run := podA.Labels["run"]
	cfg := func(name, script string) *runtime.ContainerConfig {
		c := ctrConfig(name, script)
		c.Labels["run"] = run
		return c
	}
	running := e.runCtr(aID, podA, cfg("running", "sleep 100"))
	created := e.createCtr(aID, podA, cfg("created", "true"))
	exited := e.runCtr(bID, podB, cfg("exited", "true"))
	e.waitCtrState(running, runtime.ContainerState_CONTAINER_RUNNING, 10*time.Second)
	e.waitCtrState(exited, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)

	ids := func(f *runtime.ContainerFilter) []string {
		t.Helper()
		var out []string
		for _, c := range e.listCtrs(f) {
			out = append(out, c.GetId())
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	sel := map[string]string{"run": run}
	state := func(s runtime.ContainerState) *runtime.ContainerStateValue {
		return &runtime.ContainerStateValue{State: s}
	}
	for _, tc := range []struct {
		name string
		f    *runtime.ContainerFilter
		want []string
	}{
		{"selector", &runtime.ContainerFilter{LabelSelector: sel}, sorted(running, created, exited)},
		{"pod a", &runtime.ContainerFilter{PodSandboxId: aID}, sorted(running, created)},
		{"pod b by prefix", &runtime.ContainerFilter{PodSandboxId: bID[:12]}, []string{exited}},
		{"id prefix", &runtime.ContainerFilter{Id: created[:12]}, []string{created}},
		{"full id", &runtime.ContainerFilter{Id: exited}, []string{exited}},
		{"running", &runtime.ContainerFilter{LabelSelector: sel, State: state(runtime.ContainerState_CONTAINER_RUNNING)}, []string{running}},
		{"created", &runtime.ContainerFilter{LabelSelector: sel, State: state(runtime.ContainerState_CONTAINER_CREATED)}, []string{created}},
		{"exited", &runtime.ContainerFilter{LabelSelector: sel, State: state(runtime.ContainerState_CONTAINER_EXITED)}, []string{exited}},
		{"pod and state", &runtime.ContainerFilter{PodSandboxId: aID, State: state(runtime.ContainerState_CONTAINER_EXITED)}, nil},
		{"two labels", &runtime.ContainerFilter{LabelSelector: map[string]string{"run": run, "ctr": "created"}}, []string{created}},
		{"unmatched label", &runtime.ContainerFilter{LabelSelector: map[string]string{"run": run, "ctr": "nope"}}, nil},
	} {
		if got := ids(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, c := range e.listCtrs(&runtime.ContainerFilter{Id: running}) {
		if c.GetPodSandboxId() != aID || c.GetMetadata().GetName() != "running" || c.GetImage().GetUserSpecifiedImage() != testImage ||
			c.GetImageRef() == "" || c.GetCreatedAt() == 0 || c.GetLabels()["ctr"] != "running" || c.GetAnnotations()["cri-compose.test/ctr"] != "running" {
			t.Errorf("listed as %v", c)
		}
	}
}

// TestStopContainerTimeout stops a container that ignores SIGTERM: the stop
// takes the timeout, then the container is killed.
func TestStopContainerTimeout(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("stop")
	podID := e.runPod(pod)
	id := e.runCtr(podID, pod, ctrConfig("stubborn", "trap '' TERM; echo ready; sleep 100"))
	e.waitCtrState(id, runtime.ContainerState_CONTAINER_RUNNING, 10*time.Second)
	// The trap is set once the shell printed "ready".
	suite.Eventually(t, "the container's trap", 10*time.Second, func() (bool, string) {
		lines := logLines(readLog(t, filepath.Join(pod.GetLogDirectory(), "stubborn.log")))
		return slices.Contains(lines, "stdout F ready"), strings.Join(lines, "|")
	})

	const timeout = 2
	start := time.Now()
	if _, err := e.rt().StopContainer(e.ctx(), &runtime.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	took := time.Since(start)
	t.Logf("StopContainer with timeout %ds took %v", timeout, took)
	if took < timeout*time.Second-200*time.Millisecond || took > timeout*time.Second+5*time.Second {
		t.Errorf("StopContainer took %v, want about %ds", took, timeout)
	}
	// Reported at once, without waiting for the event.
	st := e.ctrStatus(id)
	if st.GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 137 || st.GetReason() != "Error" {
		t.Errorf("after stop: %s exit %d reason %q, want EXITED 137 Error", st.GetState(), st.GetExitCode(), st.GetReason())
	}
	// Stopping again is a no-op.
	if _, err := e.rt().StopContainer(e.ctx(), &runtime.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
		t.Fatalf("second StopContainer: %v", err)
	}
}

// TestContainerKilledBehindOurBack kills a container through the engine:
// only the event stream can tell the server.
func TestContainerKilledBehindOurBack(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("kill")
	podID := e.runPod(pod)
	id := e.runCtr(podID, pod, ctrConfig("victim", "sleep 100"))
	e.waitCtrState(id, runtime.ContainerState_CONTAINER_RUNNING, 10*time.Second)
	if err := e.d.ContainerKill(e.ctx(), id, "KILL"); err != nil {
		t.Fatal(err)
	}
	st := e.waitCtrState(id, runtime.ContainerState_CONTAINER_EXITED, 10*time.Second)
	if st.GetExitCode() != 137 || st.GetFinishedAt() == 0 {
		t.Errorf("killed container: exit %d finished %d", st.GetExitCode(), st.GetFinishedAt())
	}
	// The pod's infra container, killed the same way, makes the pod NOTREADY.
	if err := e.d.ContainerKill(e.ctx(), podID, "KILL"); err != nil {
		t.Fatal(err)
	}
	suite.Eventually(t, "pod NOTREADY", 10*time.Second, func() (bool, string) {
		st := e.podStatus(podID)
		return st.GetState() == runtime.PodSandboxState_SANDBOX_NOTREADY, st.GetState().String()
	})
}

// TestOOMKilled: a container killed by the OOM killer exits 137 with
// reason OOMKilled; and when the engine's own flag is lost (its exit
// handled before its OOM notification, on Engine 20.10) the "oom" event
// alone makes the reason OOMKilled, whichever comes first.
func TestOOMKilled(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("oom")
	podID := e.runPod(pod)
	// The hog waits for a go-ahead given once it runs: on cgroup v1 the
	// engine's shim registers its OOM eventfd only after the process
	// starts, so a process killed in its first milliseconds can die with
	// no OOM notification at all, and then nobody can say OOMKilled.
	cfg := ctrConfig("hog", "until [ -e /tmp/go ]; do sleep 0.05; done; dd if=/dev/zero of=/dev/null bs=20M")
	cfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{
		MemoryLimitInBytes: 15 << 20, MemorySwapLimitInBytes: 15 << 20}}
	hog := e.runCtr(podID, pod, cfg)
	e.waitCtrState(hog, runtime.ContainerState_CONTAINER_RUNNING, 30*time.Second)
	if _, err := e.rt().ExecSync(e.ctx(), &runtime.ExecSyncRequest{ContainerId: hog, Cmd: []string{"touch", "/tmp/go"}, Timeout: 10}); err != nil {
		t.Fatalf("go-ahead: %v", err)
	}
	st := e.waitCtrState(hog, runtime.ContainerState_CONTAINER_EXITED, 30*time.Second)
	suite.Eventually(t, "reason OOMKilled", 10*time.Second, func() (bool, string) {
		st = e.ctrStatus(hog)
		return st.GetReason() == "OOMKilled", st.GetReason()
	})
	if st.GetExitCode() != 137 {
		t.Errorf("exit code %d, want 137", st.GetExitCode())
	}

	killed := e.runCtr(podID, pod, ctrConfig("killed", "kill -9 $$"))
	st = e.waitCtrState(killed, runtime.ContainerState_CONTAINER_EXITED, 30*time.Second)
	if st.GetReason() != "Error" || st.GetExitCode() != 137 {
		t.Fatalf("killed: reason %q exit %d, want Error 137", st.GetReason(), st.GetExitCode())
	}
	if err := cri.OOMEvent(e.ctx(), e.server().Srv, killed); err != nil {
		t.Fatal(err)
	}
	if st = e.ctrStatus(killed); st.GetReason() != "OOMKilled" {
		t.Errorf("after an oom event: reason %q, want OOMKilled", st.GetReason())
	}
}

// TestUpdateContainerResources resizes a running container: the cgroup
// inside it changes, ContainerStatus reports the engine's new values (what
// kubelet reads back to know an in-place resize took), and what was not
// updated stays as created.
func TestUpdateContainerResources(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("resize")
	podID := e.runPod(pod)
	cfg := ctrConfig("app", "exec sleep 3600")
	cfg.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{
		CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 256, MemoryLimitInBytes: 64 << 20, OomScoreAdj: 500}}
	id := e.runCtr(podID, pod, cfg)
	e.waitCtrState(id, runtime.ContainerState_CONTAINER_RUNNING, 20*time.Second)

	// The container's own view of its limits, on cgroup v1 or v2.
	limits := func() string {
		t.Helper()
		resp, err := e.rt().ExecSync(e.ctx(), &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", suite.CgroupLimitsScript}, Timeout: 10})
		if err != nil || resp.GetExitCode() != 0 {
			t.Fatalf("read the cgroup limits: %v exit %d %s", err, resp.GetExitCode(), resp.GetStderr())
		}
		return strings.TrimSpace(string(resp.GetStdout()))
	}
	if got, want := limits(), fmt.Sprintf("%d 50000 100000", 64<<20); got != want {
		t.Fatalf("limits as created: %q, want %q", got, want)
	}
	if r := e.ctrStatus(id).GetResources().GetLinux(); r.GetMemoryLimitInBytes() != 64<<20 || r.GetCpuQuota() != 50000 || r.GetCpuShares() != 256 {
		t.Errorf("status resources as created: %v", r)
	}

	if _, err := e.rt().UpdateContainerResources(e.ctx(), &runtime.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtime.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 512, MemoryLimitInBytes: 128 << 20}}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	if got, want := limits(), fmt.Sprintf("%d 20000 100000", 128<<20); got != want {
		t.Errorf("limits after the update: %q, want %q", got, want)
	}
	// At once: no wait for the engine's event.
	r := e.ctrStatus(id).GetResources().GetLinux()
	if r.GetMemoryLimitInBytes() != 128<<20 || r.GetCpuQuota() != 20000 || r.GetCpuPeriod() != 100000 || r.GetCpuShares() != 512 {
		t.Errorf("status resources after the update: %v", r)
	}
	if r.GetOomScoreAdj() != 500 {
		t.Errorf("oom_score_adj %d after the update, want 500 as created", r.GetOomScoreAdj())
	}
	if st := e.ctrStatus(id); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("state %s after the update, want running (in place)", st.GetState())
	}
	// Past the swap limit the engine set at creation (twice the memory
	// limit where it accounts swap): the swap allowance moves along.
	if _, err := e.rt().UpdateContainerResources(e.ctx(), &runtime.UpdateContainerResourcesRequest{ContainerId: id,
		Linux: &runtime.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 512, MemoryLimitInBytes: 512 << 20}}); err != nil {
		t.Fatalf("UpdateContainerResources past the swap limit: %v", err)
	}
	if got, want := limits(), fmt.Sprintf("%d 20000 100000", 512<<20); got != want {
		t.Errorf("limits after the update past the swap limit: %q, want %q", got, want)
	}

	// A memory limit given to a container made without one.
	free := e.runCtr(podID, pod, ctrConfig("free", "exec sleep 3600"))
	e.waitCtrState(free, runtime.ContainerState_CONTAINER_RUNNING, 20*time.Second)
	if _, err := e.rt().UpdateContainerResources(e.ctx(), &runtime.UpdateContainerResourcesRequest{ContainerId: free,
		Linux: &runtime.LinuxContainerResources{MemoryLimitInBytes: 96 << 20}}); err != nil {
		t.Fatalf("UpdateContainerResources adding a memory limit: %v", err)
	}
	if r := e.ctrStatus(free).GetResources().GetLinux(); r.GetMemoryLimitInBytes() != 96<<20 {
		t.Errorf("status resources after adding a memory limit: %v", r)
	}

	_, err := e.rt().UpdateContainerResources(e.ctx(), &runtime.UpdateContainerResourcesRequest{ContainerId: "nosuch",
		Linux: &runtime.LinuxContainerResources{MemoryLimitInBytes: 128 << 20}})
	wantCode(t, err, codes.NotFound)
}

// TestCDIDevicesNeedCDI asks for a CDI device on an engine without CDI (the
// floor's API has none): CreateContainer is Unimplemented, names the
// device, and creates nothing. On an engine with CDI, test/engines runs
// such a device for real.
func TestCDIDevicesNeedCDI(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	info, err := e.d.Info(e.ctx())
	if err != nil {
		t.Fatal(err)
	}
	if e.d.AtLeast("1.44") && len(info.CDISpecDirs) > 0 {
		t.Skipf("this engine (API %s) has CDI, spec dirs %v", e.d.APIVersion(), info.CDISpecDirs)
	}
	pod := e.podConfig("cdi")
	podID := e.runPod(pod)
	cfg := ctrConfig("app", "sleep 60")
	cfg.CDIDevices = []*runtime.CDIDevice{{Name: "vendor.example/marker=one"}}
	_, err = e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: pod})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "vendor.example/marker=one") {
		t.Errorf("CreateContainer with a CDI device on an engine without CDI: %v, want Unimplemented naming the device", err)
	}
	if n := len(e.listCtrs(&runtime.ContainerFilter{PodSandboxId: podID})); n != 0 {
		t.Errorf("%d containers after the refused create, want 0", n)
	}
	if n := len(e.engineCtrs(sandbox.LabelPodUID + "=" + pod.GetMetadata().GetUid())); n != 1 {
		t.Errorf("%d engine containers of the pod after the refused create, want 1 (its infra)", n)
	}
}
