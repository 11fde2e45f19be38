package vk

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeProbes answers for the probes: failed holds the instances that
// failed a probe, started those whose startup probe succeeded.
type fakeProbes struct {
	failedIDs  map[string]probeKind
	startedIDs map[string]bool
}

func (f fakeProbes) failed(id string) (probeKind, bool) {
	k, ok := f.failedIDs[id]
	return k, ok
}

func (f fakeProbes) state(c *v1.Container, id string) (bool, bool) {
	started := c.StartupProbe == nil || f.startedIDs[id]
	return started, started
}

// describe renders a plan one line a decision, in order.
func describe(p podActions) []string {
	var out []string
	if p.killPod {
		out = append(out, "killPod")
	}
	if len(p.stop) > 0 {
		var names []string
		for _, c := range p.stop {
			names = append(names, c.name)
		}
		sort.Strings(names)
		out = append(out, "stop "+strings.Join(names, " "))
	}
	if p.stopSandbox != "" {
		out = append(out, "stopSandbox "+p.stopSandbox)
	}
	if p.createSandbox {
		out = append(out, fmt.Sprintf("createSandbox attempt=%d kill=%v", p.sandboxAttempt, p.killSandboxes))
	}
	if p.sandboxHeld {
		out = append(out, fmt.Sprintf("sandboxHeld wait=%v", p.sandboxWait))
	}
	if p.syncContainers {
		out = append(out, "syncContainers")
	}
	if p.terminal {
		out = append(out, "terminal")
	}
	if p.recheck {
		out = append(out, "recheck")
	}
	for _, a := range p.containers {
		var s string
		switch a.kind {
		case actionStart:
			s = fmt.Sprintf("start %s attempt=%d", a.c.Name, a.attempt)
			if a.target != "" {
				s += " target=" + a.target
			}
		case actionStartCreated:
			s = "startCreated " + a.c.Name
		case actionRestart:
			s = fmt.Sprintf("restart %s attempt=%d", a.c.Name, a.attempt)
			if a.specChanged {
				s += " specChanged"
			}
		case actionBackOff:
			s = fmt.Sprintf("backoff %s wait=%v msg=%s", a.c.Name, a.wait, a.message)
		case actionKill:
			why := "spec"
			if a.kill == killProbe {
				why = "probe=" + a.probe.String()
			}
			s = fmt.Sprintf("kill %s %s grace=%d msg=%s", a.c.Name, why, a.grace, a.message)
		case actionDone:
			s = "done " + a.c.Name
		case actionNoTarget:
			s = fmt.Sprintf("noTarget %s msg=%s", a.c.Name, a.message)
		case actionResize:
			s = "resize " + a.c.Name
		}
		if a.init {
			s += " [init]"
		}
		if a.recheck {
			s += " [recheck]"
		}
		out = append(out, s)
	}
	return out
}

// TestComputePodActions covers each decision of computePodActions, from
// made-up runtime states, without a runtime.
func TestComputePodActions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// The current sandbox is sb1; sb0, of the attempt before, is left over.
	ctr := func(name string, attempt uint32, state runtimeapi.ContainerState, code int32) *criContainer {
		return &criContainer{id: fmt.Sprintf("%s-%d", name, attempt), name: name, sandboxID: "sb1", attempt: attempt,
			state: state, exitCode: code, createdAt: t0.Add(-time.Minute), finishedAt: t0}
	}
	running := func(name string, attempt uint32) *criContainer {
		return ctr(name, attempt, runtimeapi.ContainerState_CONTAINER_RUNNING, 0)
	}
	exited := func(name string, attempt uint32, code int32) *criContainer {
		return ctr(name, attempt, runtimeapi.ContainerState_CONTAINER_EXITED, code)
	}
	created := func(name string) *criContainer { return ctr(name, 0, runtimeapi.ContainerState_CONTAINER_CREATED, 0) }
	stale := func(c *criContainer) *criContainer { c.hash = "stale"; return c } // made from another spec
	policy := func(p v1.RestartPolicy) func(*v1.Pod) { return func(pod *v1.Pod) { pod.Spec.RestartPolicy = p } }
	crashed := func(name string) func(b *backoff) {
		// It was restarted once already, and failed again at t0.
		return func(b *backoff) { b.restarted("crash/uid-1/"+name, t0.Add(-time.Second)) }
	}
	sidecar := func(p v1.RestartPolicy) func() *v1.Pod { return func() *v1.Pod { return sidecarPod(p) } }
	// Container-level restart policy and rules (kubelet's
	// ContainerRestartRules): app container a's own.
	containerPolicy := func(name string, p v1.ContainerRestartPolicy) func(*v1.Pod) {
		return func(pod *v1.Pod) {
			for i := range pod.Spec.Containers {
				if pod.Spec.Containers[i].Name == name {
					pod.Spec.Containers[i].RestartPolicy = &p
				}
			}
		}
	}
	restartOn42 := func(pod *v1.Pod) {
		pod.Spec.RestartPolicy = v1.RestartPolicyNever
		containerPolicy("a", v1.ContainerRestartPolicyNever)(pod)
		pod.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	}
	const (
		none  = iota // no sandbox
		ready        // sb1 ready
		dead         // sb1 not ready, sb0 still ready
	)
	cases := []struct {
		name        string
		pod         func() *v1.Pod // testPod when nil: init "init", apps "a" and "b", grace 7
		edit        func(*v1.Pod)
		sandbox     int
		containers  []*criContainer
		state       podState
		specChanged map[string]bool
		probes      fakeProbes
		backoff     func(*backoff)
		want        []string
	}{
		{name: "fresh pod", sandbox: none, want: []string{"createSandbox attempt=0 kill=[]"}},
		{name: "sandbox died", sandbox: dead, containers: []*criContainer{exited("init", 0, 0), running("a", 0)},
			want: []string{"createSandbox attempt=2 kill=[sb0]"}},
		{name: "sandbox died, Never, containers ran", edit: policy(v1.RestartPolicyNever), sandbox: dead,
			containers: []*criContainer{exited("init", 0, 0)}, want: []string{"terminal"}},
		{name: "sandbox died, Never, nothing ran", edit: policy(v1.RestartPolicyNever), sandbox: dead,
			want: []string{"createSandbox attempt=2 kill=[sb0]"}},
		{name: "sandbox back-off pending", sandbox: none,
			backoff: func(b *backoff) { b.failed("sandbox/uid-1", t0) },
			want:    []string{"sandboxHeld wait=10s"}},
		{name: "init container first", sandbox: ready,
			want: []string{"syncContainers", "start init attempt=0 [init]"}},
		{name: "init container running: wait", sandbox: ready, containers: []*criContainer{running("init", 0)},
			want: []string{"syncContainers"}},
		{name: "init container created", sandbox: ready, containers: []*criContainer{created("init")},
			want: []string{"syncContainers", "startCreated init [init]"}},
		{name: "init container failed, Never", edit: policy(v1.RestartPolicyNever), sandbox: ready,
			containers: []*criContainer{exited("init", 0, 1)}, want: []string{"syncContainers", "terminal"}},
		{name: "init container failed, OnFailure", edit: policy(v1.RestartPolicyOnFailure), sandbox: ready,
			containers: []*criContainer{exited("init", 0, 1)}, want: []string{"syncContainers", "restart init attempt=1 [init]"}},
		{name: "init container failed, Always, in back-off", sandbox: ready,
			containers: []*criContainer{exited("init", 1, 1)}, backoff: crashed("init"),
			want: []string{"syncContainers", "backoff init wait=10s msg=back-off 10s restarting failed container=init pod=p_ns(uid-1) [init]"}},
		{name: "init container succeeded: apps start", sandbox: ready, containers: []*criContainer{exited("init", 0, 0)},
			want: []string{"syncContainers", "done init [init]", "start a attempt=0", "start b attempt=0"}},
		{name: "sidecar first", pod: sidecar(v1.RestartPolicyAlways), sandbox: ready,
			want: []string{"syncContainers", "start sc attempt=0 [init]"}},
		{name: "sidecar not started: the next waits", pod: sidecar(v1.RestartPolicyAlways), sandbox: ready,
			containers: []*criContainer{running("sc", 0)}, want: []string{"syncContainers"}},
		{name: "sidecar started: the next starts", pod: sidecar(v1.RestartPolicyAlways), sandbox: ready,
			containers: []*criContainer{running("sc", 0)}, probes: fakeProbes{startedIDs: map[string]bool{"sc-0": true}},
			want: []string{"syncContainers", "start init attempt=0 [init]"}},
		{name: "sidecar exited before the apps: restarts whatever the policy", pod: sidecar(v1.RestartPolicyNever), sandbox: ready,
			containers: []*criContainer{exited("sc", 0, 0)}, want: []string{"syncContainers", "restart sc attempt=1 [init]"}},
		{name: "sidecar exited beside the apps: look again after it", pod: sidecar(v1.RestartPolicyAlways), sandbox: ready,
			containers: []*criContainer{exited("sc", 0, 1), exited("init", 0, 0), exited("a", 0, 1)},
			want:       []string{"syncContainers", "restart sc attempt=1 [init] [recheck]", "restart a attempt=1"}},
		{name: "sidecar failed liveness", pod: sidecar(v1.RestartPolicyAlways), sandbox: ready,
			containers: []*criContainer{running("sc", 0), exited("init", 0, 0), running("a", 0)},
			probes:     fakeProbes{failedIDs: map[string]probeKind{"sc-0": probeLiveness}},
			want:       []string{"syncContainers", "kill sc probe=liveness grace=7 msg=Init container sc failed liveness probe [init] [recheck]"}},
		{name: "sidecar spec changed", pod: sidecar(v1.RestartPolicyAlways), sandbox: ready,
			containers: []*criContainer{stale(running("sc", 0))},
			want:       []string{"syncContainers", "kill sc spec grace=7 msg=Init container sc definition changed [init]"}},
		{name: "apps done: the sidecar does not keep the pod alive", pod: sidecar(v1.RestartPolicyNever), sandbox: ready,
			containers: []*criContainer{running("sc", 0), exited("init", 0, 0), exited("a", 0, 0)},
			want:       []string{"syncContainers", "terminal", "recheck"}},
		{name: "liveness failed: restart", sandbox: ready,
			edit: func(pod *v1.Pod) {
				g := int64(3)
				pod.Spec.Containers[0].LivenessProbe = &v1.Probe{TerminationGracePeriodSeconds: &g}
			},
			containers: []*criContainer{exited("init", 0, 0), running("a", 0), running("b", 0)},
			probes:     fakeProbes{failedIDs: map[string]probeKind{"a-0": probeLiveness}},
			want:       []string{"syncContainers", "kill a probe=liveness grace=3 msg=Container a failed liveness probe, will be restarted"}},
		{name: "startup probe failed, Never", sandbox: ready,
			edit: func(pod *v1.Pod) {
				pod.Spec.RestartPolicy = v1.RestartPolicyNever
				pod.Spec.Containers[0].StartupProbe = &v1.Probe{}
			},
			containers: []*criContainer{exited("init", 0, 0), running("a", 0), running("b", 0)},
			probes:     fakeProbes{failedIDs: map[string]probeKind{"a-0": probeStartup}},
			want:       []string{"syncContainers", "kill a probe=startup grace=7 msg=Container a failed startup probe"}},
		{name: "spec changed", sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), stale(running("a", 0)), running("b", 0)},
			want:       []string{"syncContainers", "kill a spec grace=7 msg="}},
		{name: "killed for a new spec: restarts at once, whatever the policy", edit: policy(v1.RestartPolicyNever), sandbox: ready,
			containers:  []*criContainer{exited("init", 0, 0), exited("a", 0, 137), exited("b", 0, 0)},
			specChanged: map[string]bool{"a": true}, backoff: crashed("a"),
			want: []string{"syncContainers", "restart a attempt=1 specChanged"}},
		{name: "OnFailure: succeeded stays, running runs", edit: policy(v1.RestartPolicyOnFailure), sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 0), running("b", 0)},
			want:       []string{"syncContainers"}},
		{name: "OnFailure: all succeeded", edit: policy(v1.RestartPolicyOnFailure), sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 0), exited("b", 0, 0)},
			want:       []string{"syncContainers", "terminal", "recheck"}},
		{name: "Never: a failed app container stays", edit: policy(v1.RestartPolicyNever), sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 1), running("b", 0)},
			want:       []string{"syncContainers"}},
		{name: "Always: back-off pending, first crash at once", sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 1, 2), exited("b", 0, 0)}, backoff: crashed("a"),
			want: []string{"syncContainers",
				"backoff a wait=10s msg=back-off 10s restarting failed container=a pod=p_ns(uid-1)", "restart b attempt=1"}},
		{name: "container Never under pod Always: stays exited", edit: containerPolicy("a", v1.ContainerRestartPolicyNever), sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 1), running("b", 0)},
			want:       []string{"syncContainers"}},
		{name: "container Always under pod Never: restarts", edit: func(pod *v1.Pod) {
			pod.Spec.RestartPolicy = v1.RestartPolicyNever
			containerPolicy("a", v1.ContainerRestartPolicyAlways)(pod)
		}, sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 0), running("b", 0)},
			want:       []string{"syncContainers", "restart a attempt=1"}},
		{name: "restart rule matches the exit code", edit: restartOn42, sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 42), running("b", 0)},
			want:       []string{"syncContainers", "restart a attempt=1"}},
		{name: "restart rule does not match: the pod is done", edit: restartOn42, sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 1), exited("b", 0, 0)},
			want:       []string{"syncContainers", "terminal", "recheck"}},
		{name: "init container failed, its rule restarts it under Never", sandbox: ready, edit: func(pod *v1.Pod) {
			pod.Spec.RestartPolicy = v1.RestartPolicyNever
			never := v1.ContainerRestartPolicyNever
			pod.Spec.InitContainers[0].RestartPolicy = &never
			pod.Spec.InitContainers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
				ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpNotIn, Values: []int32{3}}}}
		},
			containers: []*criContainer{exited("init", 0, 1)}, want: []string{"syncContainers", "restart init attempt=1 [init]"}},
		{name: "liveness failed, container Never under pod Always: not restarted", sandbox: ready,
			edit: func(pod *v1.Pod) {
				containerPolicy("a", v1.ContainerRestartPolicyNever)(pod)
				pod.Spec.Containers[0].LivenessProbe = &v1.Probe{}
			},
			containers: []*criContainer{exited("init", 0, 0), running("a", 0), running("b", 0)},
			probes:     fakeProbes{failedIDs: map[string]probeKind{"a-0": probeLiveness}},
			want:       []string{"syncContainers", "kill a probe=liveness grace=7 msg=Container a failed liveness probe"}},
		{name: "app container created", sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), created("a"), running("b", 0)},
			want:       []string{"syncContainers", "startCreated a"}},
		{name: "app container in an unknown state: left alone", sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), ctr("a", 0, runtimeapi.ContainerState_CONTAINER_UNKNOWN, 0), running("b", 0)},
			want:       []string{"syncContainers"}},
		{name: "terminal pod: its sidecar stops", pod: sidecar(v1.RestartPolicyNever), state: podTerminal, sandbox: ready,
			containers: []*criContainer{running("sc", 0), exited("init", 0, 0), exited("a", 0, 0)},
			want:       []string{"stop sc"}},
		{name: "terminal pod: then its sandbox", state: podTerminal, sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 0), exited("b", 0, 1)},
			want:       []string{"stopSandbox sb1"}},
		{name: "terminal pod, sandbox stopped: nothing restarts", state: podTerminal, sandbox: dead,
			containers: []*criContainer{exited("init", 0, 0), exited("a", 0, 1)}, want: nil},
		{name: "pod deleting", state: podDeleting, sandbox: ready,
			containers: []*criContainer{exited("init", 0, 0), running("a", 0), created("b")},
			want:       []string{"killPod", "stop a b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod()
			if tc.pod != nil {
				pod = tc.pod()
			}
			if tc.edit != nil {
				tc.edit(pod)
			}
			obs := &observation{containers: map[string][]*criContainer{}}
			switch tc.sandbox {
			case ready:
				obs.sandboxes = []*runtimeapi.PodSandbox{{Id: "sb1", Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 1}, State: runtimeapi.PodSandboxState_SANDBOX_READY}}
				obs.sandbox = &runtimeapi.PodSandboxStatus{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_READY}
			case dead:
				obs.sandboxes = []*runtimeapi.PodSandbox{
					{Id: "sb1", Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 1}, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY},
					{Id: "sb0", Metadata: &runtimeapi.PodSandboxMetadata{Attempt: 0}, State: runtimeapi.PodSandboxState_SANDBOX_READY},
				}
				obs.sandbox = &runtimeapi.PodSandboxStatus{Id: "sb1", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
			}
			for _, c := range tc.containers {
				obs.containers[c.name] = append(obs.containers[c.name], c)
			}
			clk := clocktesting.NewFakeClock(t0)
			b := newBackoff(clk, backoffInitial, backoffMax)
			if tc.backoff != nil {
				tc.backoff(b)
			}
			in := planInput{pod: pod, obs: obs, state: tc.state, specChanged: tc.specChanged, probes: tc.probes, backoff: b}
			if got := describe(computePodActions(in)); !slices.Equal(got, tc.want) {
				t.Errorf("plan:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestContainerResultReasons: one place names the waiting reason of each
// step's failure, and a step that succeeded clears it.
func TestContainerResultReasons(t *testing.T) {
	w := &podWorker{waiting: map[string]*waiting{"a": {reason: reasonCrashLoopBackOff}}}
	for _, tc := range []struct {
		res  containerResult
		want string // "": no waiting reason
	}{
		{containerResult{step: stepSandbox, message: "m"}, reasonContainerCreating},
		{containerResult{step: stepBackOff, message: "m"}, reasonCrashLoopBackOff},
		{containerResult{step: stepImage, reason: reasonErrImagePull, message: "m"}, reasonErrImagePull},
		{containerResult{step: stepConfig, message: "m"}, reasonCreateConfigError},
		{containerResult{step: stepCreate, message: "m"}, reasonCreateContainerError},
		{containerResult{step: stepStart, message: "m"}, reasonRunContainerError},
		{containerResult{step: stepPostStart, message: "m"}, reasonPostStartHookError},
		{containerResult{step: stepOK}, ""},
	} {
		tc.res.name = "a"
		w.record([]containerResult{tc.res})
		got := w.waiting["a"]
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("step %d: waiting %+v, want none", tc.res.step, got)
		case tc.want != "" && (got == nil || got.reason != tc.want || got.message != "m"):
			t.Errorf("step %d: waiting %+v, want %s with message m", tc.res.step, got, tc.want)
		}
	}
}
