// Package fault is cri-compose's fault matrix, against the real
// engine and the built binary:
//
//   - TestKillAtStep: cri-compose is killed with SIGKILL at every step of
//     RunPodSandbox, CreateContainer, StartContainer, StopPodSandbox and
//     RemovePodSandbox (pkg/cri/failpoint.go), restarted, and driven
//     through kubelet's retry; the engine then holds exactly the expected
//     containers, network and project folders, none leaked and none lost.
//   - TestEngineAway: the engine is unreachable for a while (a socket proxy
//     the test cuts): RPCs answer Unavailable, Status reports not ready,
//     and cri-compose recovers by itself, with what changed meanwhile.
//   - TestEngineRestart: a private Docker engine restarts under running
//     pods, with and without live-restore (skipped unless root).
//   - TestEngineSlow: every request reaches the engine 3 s late: RPCs keep
//     their deadlines, lists answer from memory, nothing piles up, and
//     everything works again when the latency goes.
//   - TestLogDiskFull, TestStateDirFull: a pod's log directory, or the
//     state dir, on a small tmpfs that fills (skipped unless root).
//
// `make test-fault` is the CI mode (about two minutes): the same tests with
// a CPU hog beside them (load_test.go, -fault.cpu-hog), so that what they
// check holds on a busy machine. `go test ./test/fault` runs them on a
// quiet one. Nothing here has a long mode.
package fault

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/suite"
)

func TestMain(m *testing.M) {
	runHogIfChild() // load_test.go
	flag.Parse()
	max := *cpuHogMax
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 && d < max {
			max = d
		}
	}
	stop, err := startCPUHog(*cpuHog, max)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := suite.Main(m)
	if s := stop(); s != "" {
		fmt.Fprintln(os.Stderr, s)
	}
	os.Exit(code)
}

// crash sends the request that reaches the armed failpoint and checks that
// it failed because cri-compose died there, by SIGKILL.
func (k *kube) crash(step string, call func() error) {
	k.t.Helper()
	err := call()
	if err == nil {
		k.t.Fatalf("failpoint %s: the request succeeded: the step was never reached", step)
	}
	st := k.d.WaitExit(30 * time.Second)
	if !suite.KilledBySIGKILL(st) {
		k.t.Fatalf("failpoint %s: request failed with %v, and cri-compose %v, want killed by SIGKILL there\n%s",
			step, err, st, k.d.LogTail(30))
	}
	if c := status.Code(err); c != codes.Unavailable {
		k.t.Logf("failpoint %s: the request failed with %v (%v)", step, c, err)
	}
}

// restart starts cri-compose again on the same state, without failpoint,
// and checks that it lists exactly what the engine holds.
func (k *kube) restart() {
	k.t.Helper()
	k.d.Start()
	k.consistent("after the restart")
}

func podState(k *kube, id string) runtime.PodSandboxState {
	k.t.Helper()
	r, err := k.d.RT.PodSandboxStatus(k.ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		k.t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	return r.GetStatus().GetState()
}

func ctrState(k *kube, id string) runtime.ContainerState {
	k.t.Helper()
	r, err := k.d.RT.ContainerStatus(k.ctx, &runtime.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		k.t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	return r.GetStatus().GetState()
}

// onlyPod is the one pod listed, checked to be attempt in state.
func onlyPod(k *kube, attempt uint32, state runtime.PodSandboxState) string {
	k.t.Helper()
	pods := k.listPods()
	if len(pods) != 1 || pods[0].GetMetadata().GetAttempt() != attempt || pods[0].GetState() != state {
		k.t.Fatalf("pods listed after the restart: %v, want attempt %d %v", pods, attempt, state)
	}
	return pods[0].GetId()
}

// TestKillAtStep is the kill -9 matrix: one subtest per failpoint, each
// with its own daemon, namespace and network.
func TestKillAtStep(t *testing.T) {
	steps := map[string]func(k *kube){
		// Killed before anything exists but the pod's folder: kubelet
		// runs the pod again; the restart swept the folder.
		cri.FailRunBeforeInfraCreate: func(k *kube) {
			pod := k.podConfig("web", 0)
			k.crash(cri.FailRunBeforeInfraCreate, func() error {
				_, err := k.d.RT.RunPodSandbox(k.ctx, &runtime.RunPodSandboxRequest{Config: pod})
				return err
			})
			k.restart()
			k.expect("after the restart", nil)
			id, ctrs := k.runWith(pod, "app")
			k.expect("after kubelet's retry", map[string][]string{id: ctrs})
		},
		// Killed with the infra container made but not started: listed
		// NOTREADY; kubelet stops it, runs attempt 1, and its GC removes
		// attempt 0.
		cri.FailRunAfterInfraCreate:  retryNotReadyPod(cri.FailRunAfterInfraCreate),
		cri.FailRunAfterComposeWrite: retryNotReadyPod(cri.FailRunAfterComposeWrite),
		// Killed after the start, before the answer: listed READY, and
		// kubelet goes on with it.
		cri.FailRunAfterStart: func(k *kube) {
			pod := k.podConfig("web", 0)
			k.crash(cri.FailRunAfterStart, func() error {
				_, err := k.d.RT.RunPodSandbox(k.ctx, &runtime.RunPodSandboxRequest{Config: pod})
				return err
			})
			k.restart()
			id := onlyPod(k, 0, runtime.PodSandboxState_SANDBOX_READY)
			k.pods[id] = pod
			k.expect("after the restart", map[string][]string{id: nil})
			c := k.create(id, ctrConfig("app", 0))
			k.start(c)
			k.expect("after kubelet's retry", map[string][]string{id: {c}})
		},
		// Killed with the container made, the compose file not updated:
		// listed CREATED; kubelet makes attempt 1 and removes attempt 0.
		cri.FailCreateAfterCreate: func(k *kube) {
			id := k.run(k.podConfig("web", 0))
			k.crash(cri.FailCreateAfterCreate, func() error {
				_, err := k.d.RT.CreateContainer(k.ctx, &runtime.CreateContainerRequest{PodSandboxId: id, Config: ctrConfig("app", 0), SandboxConfig: k.pods[id]})
				return err
			})
			k.restart()
			ctrs := k.listContainers()
			if len(ctrs) != 1 || ctrs[0].GetState() != runtime.ContainerState_CONTAINER_CREATED {
				k.t.Fatalf("containers after the restart: %v, want one CREATED", ctrs)
			}
			old := ctrs[0].GetId()
			k.expect("after the restart", map[string][]string{id: {old}})
			c := k.create(id, ctrConfig("app", 1))
			k.start(c)
			k.removeContainer(old)
			k.expect("after kubelet's retry", map[string][]string{id: {c}})
		},
		// Killed after the start, before the log pump: the restart
		// reports it RUNNING and its output reaches the CRI log.
		cri.FailStartAfterStart: func(k *kube) {
			id := k.run(k.podConfig("web", 0))
			c := k.create(id, ctrConfig("app", 0))
			k.crash(cri.FailStartAfterStart, func() error {
				_, err := k.d.RT.StartContainer(k.ctx, &runtime.StartContainerRequest{ContainerId: c})
				return err
			})
			k.restart()
			if st := ctrState(k, c); st != runtime.ContainerState_CONTAINER_RUNNING {
				k.t.Errorf("container after the restart: %v, want RUNNING", st)
			}
			suite.WaitCRILog(k.t, filepath.Join(k.pods[id].GetLogDirectory(), "app", "0.log"), "stdout F started app", 15*time.Second)
			k.expect("after the restart", map[string][]string{id: {c}})
		},
		// Killed amid StopPodSandbox: kubelet stops again and removes.
		cri.FailStopBetweenContainers: retryStop(cri.FailStopBetweenContainers),
		cri.FailStopBeforeInfraStop:   retryStop(cri.FailStopBeforeInfraStop),
		// Killed amid RemovePodSandbox: kubelet removes again.
		cri.FailRemoveAfterContainers:  retryRemove(cri.FailRemoveAfterContainers),
		cri.FailRemoveAfterInfraRemove: retryRemove(cri.FailRemoveAfterInfraRemove),
	}
	for _, step := range cri.FailpointSteps {
		f := steps[step]
		if f == nil {
			t.Errorf("failpoint %s has no scenario here", step)
			continue
		}
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			k := newKube(t, "", suite.DaemonConfig{})
			k.d.Start(cri.FailpointEnv + "=" + step)
			f(k)
			k.teardown()
			t.Logf("%s: %v", step, time.Since(start).Round(time.Millisecond))
		})
	}
}

func retryNotReadyPod(step string) func(k *kube) {
	return func(k *kube) {
		pod := k.podConfig("web", 0)
		k.crash(step, func() error {
			_, err := k.d.RT.RunPodSandbox(k.ctx, &runtime.RunPodSandboxRequest{Config: pod})
			return err
		})
		k.restart()
		old := onlyPod(k, 0, runtime.PodSandboxState_SANDBOX_NOTREADY)
		k.pods[old] = pod
		// The restart rewrote its compose file.
		k.expect("after the restart", map[string][]string{old: nil})
		k.stopPod(old)
		id, ctrs := k.runWith(k.podConfig("web", 1), "app")
		k.removePod(old)
		k.expect("after kubelet's retry", map[string][]string{id: ctrs})
	}
}

func retryStop(step string) func(k *kube) {
	return func(k *kube) {
		id, ctrs := k.runWith(k.podConfig("web", 0), "app", "side")
		k.crash(step, func() error {
			_, err := k.d.RT.StopPodSandbox(k.ctx, &runtime.StopPodSandboxRequest{PodSandboxId: id})
			return err
		})
		k.restart()
		exited := 0
		for _, c := range ctrs {
			if ctrState(k, c) == runtime.ContainerState_CONTAINER_EXITED {
				exited++
			}
		}
		if exited == 0 || (step == cri.FailStopBeforeInfraStop && exited != len(ctrs)) {
			k.t.Errorf("%d of %d containers exited after the restart", exited, len(ctrs))
		}
		if step == cri.FailStopBeforeInfraStop && podState(k, id) != runtime.PodSandboxState_SANDBOX_READY {
			k.t.Errorf("pod %v before its infra container was stopped", podState(k, id))
		}
		k.expect("after the restart", map[string][]string{id: ctrs})
		k.stopPod(id)
		k.removePod(id)
		k.expect("after kubelet's retry", nil)
	}
}

func retryRemove(step string) func(k *kube) {
	return func(k *kube) {
		id, ctrs := k.runWith(k.podConfig("web", 0), "app", "side")
		k.stopPod(id)
		k.crash(step, func() error {
			_, err := k.d.RT.RemovePodSandbox(k.ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		})
		k.restart()
		pods := k.listPods()
		switch step {
		case cri.FailRemoveAfterContainers:
			if len(pods) != 1 || pods[0].GetState() != runtime.PodSandboxState_SANDBOX_NOTREADY || len(k.listContainers()) != 0 {
				k.t.Errorf("after the restart: pods %v, containers %v; want the pod NOTREADY, no container", pods, k.listContainers())
			}
			k.expect("after the restart", map[string][]string{id: nil})
		case cri.FailRemoveAfterInfraRemove:
			// Its folder, left by the crash, was swept by the restart.
			k.expect("after the restart", nil)
		}
		_ = ctrs
		k.removePod(id)
		k.expect("after kubelet's retry", nil)
		if slices.Contains(k.d.ProjectFolders(), sandbox.ProjectName(k.pods[id].GetMetadata())) {
			k.t.Errorf("the removed pod's folder is back")
		}
	}
}
