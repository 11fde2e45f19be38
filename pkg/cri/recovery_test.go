package cri_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/suite"
)

// gateScript waits for the file /gate/<name> (touched by the test on the
// host) before going on.
func gateScript(name string) string {
	return "while [ ! -e /gate/" + name + " ]; do sleep 0.02; done"
}

// touch creates the gate file name in dir.
func touch(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveryRestart stops the server under a running pod and starts a new
// one on the same state: it must find everything as it was (the engine is
// the database), see what happened while it was down, and carry every log
// line into the CRI log files exactly once.
func TestRecoveryRestart(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	gate := t.TempDir()
	pod := e.podConfig("recover")
	podID := e.runPod(pod)
	withGate := func(c *runtime.ContainerConfig) *runtime.ContainerConfig {
		c.Mounts = []*runtime.Mount{{HostPath: gate, ContainerPath: "/gate"}}
		return c
	}

	sleeper := e.runCtr(podID, pod, withGate(ctrConfig("sleeper", "echo up; sleep 100")))
	// counter prints 1..20: 1..5 before the restart, 6..12 while the server
	// is down, 13..20 after; then it exits 7.
	counter := e.runCtr(podID, pod, withGate(ctrConfig("counter",
		`i=1; while [ $i -le 20 ]; do echo $i; `+
			`if [ $i = 5 ]; then `+gateScript("a")+`; fi; `+
			`if [ $i = 12 ]; then touch /gate/at12; `+gateScript("b")+`; fi; `+
			`i=$((i+1)); sleep 0.01; done; exit 7`)))
	// quitter exits 7 while the server is down, after a last line.
	quitter := e.runCtr(podID, pod, withGate(ctrConfig("quitter", gateScript("quit")+"; echo bye; exit 7")))
	// created is never started.
	created := e.createCtr(podID, pod, ctrConfig("created", "true"))

	counterLog := filepath.Join(pod.GetLogDirectory(), "counter.log")
	suite.Eventually(t, "counter at 5", 20*time.Second, func() (bool, string) {
		lines := logLines(readLog(t, counterLog))
		return len(lines) == 5, strings.Join(lines, "|")
	})
	e.waitCtrState(sleeper, runtime.ContainerState_CONTAINER_RUNNING, 10*time.Second)

	before := map[string]*runtime.ContainerStatus{}
	for _, id := range []string{sleeper, counter, quitter, created} {
		before[id] = e.ctrStatus(id)
	}
	podBefore := e.podStatus(podID)

	e.restart(func() {
		touch(t, gate, "a")
		touch(t, gate, "quit")
		suite.Eventually(t, "quitter exit and counter at 12 while the server is down", 20*time.Second, func() (bool, string) {
			in, err := e.d.ContainerInspect(e.ctx(), quitter)
			if err != nil {
				return false, err.Error()
			}
			_, err = os.Stat(filepath.Join(gate, "at12"))
			return in.State.Status == "exited" && err == nil, string(in.State.Status)
		})
	})

	// Ready means the new server knows every pod and container already.
	if got := e.listPods(&runtime.PodSandboxFilter{Id: podID}); len(got) != 1 {
		t.Fatalf("right after Status says ready, ListPodSandbox finds %d pods for %s", len(got), podID)
	}
	if got := e.listCtrs(&runtime.ContainerFilter{PodSandboxId: podID}); len(got) != 4 {
		t.Fatalf("right after Status says ready, ListContainers finds %d containers of the pod, want 4", len(got))
	}

	podAfter := e.podStatus(podID)
	if podAfter.GetState() != runtime.PodSandboxState_SANDBOX_READY || podAfter.GetCreatedAt() != podBefore.GetCreatedAt() ||
		podAfter.GetNetwork().GetIp() != podBefore.GetNetwork().GetIp() ||
		!proto.Equal(podAfter.GetMetadata(), podBefore.GetMetadata()) ||
		!mapsEqual(podAfter.GetLabels(), podBefore.GetLabels()) || !mapsEqual(podAfter.GetAnnotations(), podBefore.GetAnnotations()) {
		t.Errorf("pod after restart:\n%v\nbefore:\n%v", podAfter, podBefore)
	}
	found := false
	for _, p := range e.listPods(&runtime.PodSandboxFilter{LabelSelector: map[string]string{"run": pod.Labels["run"]}}) {
		found = found || p.GetId() == podID
	}
	if !found {
		t.Errorf("the pod is not listed by its labels after the restart")
	}

	for id, b := range before {
		a := e.ctrStatus(id)
		if !proto.Equal(a.GetMetadata(), b.GetMetadata()) || !mapsEqual(a.GetLabels(), b.GetLabels()) ||
			!mapsEqual(a.GetAnnotations(), b.GetAnnotations()) || a.GetLogPath() != b.GetLogPath() ||
			a.GetCreatedAt() != b.GetCreatedAt() || a.GetImageRef() != b.GetImageRef() ||
			a.GetImage().GetUserSpecifiedImage() != b.GetImage().GetUserSpecifiedImage() {
			t.Errorf("container %s after restart:\n%v\nbefore:\n%v", b.GetMetadata().GetName(), a, b)
		}
		if b.GetStartedAt() != 0 && a.GetStartedAt() != b.GetStartedAt() {
			t.Errorf("container %s: started_at %d, was %d", b.GetMetadata().GetName(), a.GetStartedAt(), b.GetStartedAt())
		}
	}
	if st := e.ctrStatus(sleeper); st.GetState() != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("sleeper is %s after the restart", st.GetState())
	}
	if st := e.ctrStatus(created); st.GetState() != runtime.ContainerState_CONTAINER_CREATED {
		t.Errorf("created is %s after the restart", st.GetState())
	}
	st := e.ctrStatus(quitter)
	if st.GetState() != runtime.ContainerState_CONTAINER_EXITED || st.GetExitCode() != 7 || st.GetReason() != "Error" || st.GetFinishedAt() == 0 {
		t.Errorf("quitter, which exited while the server was down: %s exit %d reason %q finished %d",
			st.GetState(), st.GetExitCode(), st.GetReason(), st.GetFinishedAt())
	}
	// Its last line, written while the server was down, reaches its log.
	quitterLog := filepath.Join(pod.GetLogDirectory(), "quitter.log")
	suite.Eventually(t, "quitter's log", 10*time.Second, func() (bool, string) {
		lines := logLines(readLog(t, quitterLog))
		return len(lines) == 1 && lines[0] == "stdout F bye", strings.Join(lines, "|")
	})

	// The new server follows the counter: 13..20, then the exit.
	touch(t, gate, "b")
	st = e.waitCtrState(counter, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)
	if st.GetExitCode() != 7 {
		t.Errorf("counter exit code %d, want 7", st.GetExitCode())
	}
	var want []string
	for i := 1; i <= 20; i++ {
		want = append(want, "stdout F "+strconv.Itoa(i))
	}
	recs := readLog(t, counterLog)
	if got := logLines(recs); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("counter log across the restart:\n%s\nwant 1..20 once each, in order", strings.Join(got, "\n"))
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Time.Before(recs[i-1].Time) {
			t.Errorf("log record %d at %v is before record %d at %v", i, recs[i].Time, i-1, recs[i-1].Time)
		}
	}
	// A log line is in the file once the sleeper's output is too.
	if lines := logLines(readLog(t, filepath.Join(pod.GetLogDirectory(), "sleeper.log"))); strings.Join(lines, "|") != "stdout F up" {
		t.Errorf("sleeper log after restart: %q", lines)
	}

	// The restarted server still drives the pod.
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	if st := e.ctrStatus(sleeper); st.GetState() != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("sleeper is %s after StopPodSandbox", st.GetState())
	}
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	project := sandbox.ProjectName(pod.GetMetadata())
	if list := e.engineCtrs(sandbox.LabelProject + "=" + project); len(list) != 0 {
		t.Errorf("engine holds %d containers of the removed pod", len(list))
	}
	// Nothing was written twice by the two servers.
	if got := logLines(readLog(t, counterLog)); len(got) != 20 {
		t.Errorf("counter log has %d lines after removal, want 20", len(got))
	}
}

// TestRecoveryHalfMadeSandbox: cri-compose was killed in RunPodSandbox after
// creating the infra container and before starting it. The next server
// lists the pod NOTREADY, and Stop+Remove clean it up fully. A project folder
// whose pod is gone is swept.
func TestRecoveryHalfMadeSandbox(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("halfmade")
	e.cleanupPod(pod)
	project := sandbox.ProjectName(pod.GetMetadata())
	orphan := sandbox.ProjectName(e.podConfig("orphan").GetMetadata())
	var id string
	e.restart(func() {
		spec, err := sandbox.SandboxSpec(pod, sandbox.Host{Network: testNetwork, StateDir: e.stateDir, InfraImage: pause.Ref()})
		if err != nil {
			t.Fatal(err)
		}
		spec.SetConfigHash()
		id, err = e.d.ContainerCreate(e.ctx(), spec.Name, spec.Config, spec.HostConfig, spec.Networking)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(e.projectDir(orphan), 0o755); err != nil {
			t.Fatal(err)
		}
		touch(t, e.projectDir(orphan), "compose.yaml")
	})

	items := e.listPods(&runtime.PodSandboxFilter{Id: id})
	if len(items) != 1 || items[0].GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY ||
		items[0].GetMetadata().GetUid() != pod.GetMetadata().GetUid() {
		t.Fatalf("half-made pod listed as %v, want it once, NOTREADY", items)
	}
	if st := e.podStatus(id); st.GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("half-made pod status %s", st.GetState())
	}
	if _, err := os.Stat(e.projectDir(orphan)); !os.IsNotExist(err) {
		t.Errorf("the orphan project folder survived the restart (%v)", err)
	}
	// kubelet would retry RunPodSandbox with the same attempt: refused
	// while the half-made one is there.
	_, err := e.rt().RunPodSandbox(e.ctx(), &runtime.RunPodSandboxRequest{Config: pod})
	if err == nil {
		t.Errorf("RunPodSandbox over a half-made sandbox succeeded")
	}

	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("StopPodSandbox of the half-made pod: %v", err)
	}
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox of the half-made pod: %v", err)
	}
	if list := e.engineCtrs(sandbox.LabelProject + "=" + project); len(list) != 0 {
		t.Errorf("engine holds %d containers of the half-made pod", len(list))
	}
	if _, err := os.Stat(e.projectDir(project)); !os.IsNotExist(err) {
		t.Errorf("project folder of the half-made pod survived (%v)", err)
	}
	if got := e.listPods(&runtime.PodSandboxFilter{Id: id}); len(got) != 0 {
		t.Errorf("the removed half-made pod is still listed")
	}
	// And now the pod can be made for real.
	id2 := e.runPod(pod)
	if st := e.podStatus(id2); st.GetState() != runtime.PodSandboxState_SANDBOX_READY {
		t.Errorf("the pod run after the cleanup is %s", st.GetState())
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestTwoServersOneEngine: a second instance with its own state dir on the
// same engine and network leaves the first one's pods alone: it does not
// list them, cannot remove them, writes no compose file for them and does
// not pump their logs (which would duplicate every line).
func TestTwoServersOneEngine(t *testing.T) {
	t.Parallel()
	a := newCRIEnv(t)
	pod := a.podConfig("mine")
	podID := a.runPod(pod)
	project := sandbox.ProjectName(pod.GetMetadata())
	talker := a.runCtr(podID, pod, ctrConfig("talker",
		"i=1; while [ $i -le 30 ]; do echo $i; i=$((i+1)); sleep 0.02; done"))
	a.waitCtrState(talker, runtime.ContainerState_CONTAINER_RUNNING, 10*time.Second)

	b := newCRIEnv(t) // starts (and resyncs) while the talker talks
	if got := b.listPods(&runtime.PodSandboxFilter{Id: podID}); len(got) != 0 {
		t.Errorf("the other server lists the pod: %v", got)
	}
	if got := b.listCtrs(&runtime.ContainerFilter{Id: talker}); len(got) != 0 {
		t.Errorf("the other server lists the container: %v", got)
	}
	_, err := b.rt().ContainerStatus(b.ctx(), &runtime.ContainerStatusRequest{ContainerId: talker})
	wantCode(t, err, codes.NotFound)
	if _, err := b.rt().RemovePodSandbox(b.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Errorf("RemovePodSandbox of a pod the server does not own: %v", err)
	}
	if st := a.podStatus(podID); st.GetState() != runtime.PodSandboxState_SANDBOX_READY {
		t.Errorf("the pod is %s after the other server's RemovePodSandbox", st.GetState())
	}
	if _, err := os.Stat(b.projectDir(project)); !os.IsNotExist(err) {
		t.Errorf("the other server wrote a project folder for the pod (%v)", err)
	}

	st := a.waitCtrState(talker, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)
	var want []string
	for i := 1; i <= 30; i++ {
		want = append(want, "stdout F "+strconv.Itoa(i))
	}
	if got := logLines(readLog(t, st.GetLogPath())); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("talker log:\n%s\nwant 1..30 once each", strings.Join(got, "\n"))
	}
}
