package vk

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func running(name, sb string, attempt uint32) *criContainer {
	return &criContainer{id: name + "-" + string(rune('0'+attempt)), name: name, sandboxID: sb, attempt: attempt,
		state: runtimeapi.ContainerState_CONTAINER_RUNNING, startedAt: t0, imageRef: "sha256:img"}
}

func exited(name, sb string, attempt uint32, code int32) *criContainer {
	c := running(name, sb, attempt)
	c.state, c.exitCode, c.finishedAt = runtimeapi.ContainerState_CONTAINER_EXITED, code, t0.Add(time.Second)
	return c
}

func specPod(policy v1.RestartPolicy, inits []string, apps ...string) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"}, Spec: v1.PodSpec{RestartPolicy: policy}}
	for _, n := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: n, Image: "img"})
	}
	for _, n := range apps {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: n, Image: "img"})
	}
	return p
}

// withSidecar makes the pod's init containers named names sidecars.
func withSidecar(p *v1.Pod, names ...string) *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	for i := range p.Spec.InitContainers {
		if slices.Contains(names, p.Spec.InitContainers[i].Name) {
			p.Spec.InitContainers[i].RestartPolicy = &always
		}
	}
	return p
}

func TestComputeStatus(t *testing.T) {
	sb := &sandboxInfo{id: "sb", ready: true, ips: []string{"10.1.0.5"}}
	type check func(t *testing.T, st v1.PodStatus)
	phase := func(want v1.PodPhase) check {
		return func(t *testing.T, st v1.PodStatus) {
			if st.Phase != want {
				t.Errorf("phase %s, want %s", st.Phase, want)
			}
		}
	}
	cond := func(ct v1.PodConditionType, want v1.ConditionStatus, reason string) check {
		return func(t *testing.T, st v1.PodStatus) {
			for _, c := range st.Conditions {
				if c.Type == ct {
					if c.Status != want || c.Reason != reason {
						t.Errorf("%s = %s (%s), want %s (%s)", ct, c.Status, c.Reason, want, reason)
					}
					return
				}
			}
			t.Errorf("no condition %s", ct)
		}
	}
	state := func(name, want string) check {
		return func(t *testing.T, st v1.PodStatus) {
			cs := containerStatus(st, name)
			got := ""
			switch {
			case cs.State.Running != nil:
				got = "running"
			case cs.State.Waiting != nil:
				got = "waiting:" + cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				got = "terminated:" + cs.State.Terminated.Reason
			}
			if got != want {
				t.Errorf("container %s state %s, want %s", name, got, want)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		in     statusInput
		checks []check
	}{
		{
			name: "no sandbox yet",
			in:   statusInput{pod: specPod(v1.RestartPolicyAlways, nil, "a")},
			checks: []check{phase(v1.PodPending), state("a", "waiting:ContainerCreating"),
				cond(v1.PodReadyToStartContainers, v1.ConditionFalse, ""), cond(v1.PodScheduled, v1.ConditionTrue, "")},
		},
		{
			// kubelet's default waiting reason for every container of a
			// pod with init containers, the later init containers too.
			name: "first init failed",
			in: statusInput{pod: specPod(v1.RestartPolicyAlways, []string{"i", "j"}, "a"), sandbox: sb,
				containers: map[string][]*criContainer{"i": {exited("i", "sb", 0, 1)}}},
			checks: []check{phase(v1.PodPending), state("i", "terminated:Error"), state("j", "waiting:PodInitializing"),
				state("a", "waiting:PodInitializing"), cond(v1.PodInitialized, v1.ConditionFalse, "ContainersNotInitialized")},
		},
		{
			name: "init running",
			in: statusInput{pod: specPod(v1.RestartPolicyAlways, []string{"i"}, "a"), sandbox: sb,
				containers: map[string][]*criContainer{"i": {running("i", "sb", 0)}}},
			checks: []check{phase(v1.PodPending), state("i", "running"), state("a", "waiting:PodInitializing"),
				cond(v1.PodInitialized, v1.ConditionFalse, "ContainersNotInitialized")},
		},
		{
			name: "running and ready",
			in: statusInput{pod: specPod(v1.RestartPolicyAlways, []string{"i"}, "a", "b"), sandbox: sb, runtimeName: "rt",
				containers: map[string][]*criContainer{"i": {exited("i", "sb", 0, 0)}, "a": {running("a", "sb", 0)}, "b": {running("b", "sb", 0)}}},
			checks: []check{phase(v1.PodRunning), state("i", "terminated:Completed"), state("a", "running"),
				cond(v1.PodInitialized, v1.ConditionTrue, ""), cond(v1.ContainersReady, v1.ConditionTrue, ""), cond(v1.PodReady, v1.ConditionTrue, ""),
				func(t *testing.T, st v1.PodStatus) {
					if st.PodIP != "10.1.0.5" || containerStatus(st, "a").ContainerID != "rt://a-0" || !containerStatus(st, "a").Ready {
						t.Errorf("ip %s id %s", st.PodIP, containerStatus(st, "a").ContainerID)
					}
				}},
		},
		{
			name: "crash loop",
			in: statusInput{pod: specPod(v1.RestartPolicyAlways, nil, "a"), sandbox: sb,
				containers: map[string][]*criContainer{"a": {exited("a", "sb", 3, 2), exited("a", "sb", 2, 2)}},
				waiting:    map[string]*waiting{"a": {reason: reasonCrashLoopBackOff, message: "back-off 40s"}}},
			checks: []check{phase(v1.PodRunning), state("a", "waiting:CrashLoopBackOff"),
				cond(v1.PodReady, v1.ConditionFalse, "ContainersNotReady"),
				func(t *testing.T, st v1.PodStatus) {
					cs := containerStatus(st, "a")
					if cs.RestartCount != 3 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 2 ||
						cs.LastTerminationState.Terminated.Reason != "Error" {
						t.Errorf("%+v", cs)
					}
				}},
		},
		{
			name: "init failed, restartPolicy Never",
			in: statusInput{pod: specPod(v1.RestartPolicyNever, []string{"i"}, "a"), sandbox: sb,
				containers: map[string][]*criContainer{"i": {exited("i", "sb", 0, 1)}}},
			checks: []check{phase(v1.PodFailed), state("i", "terminated:Error")},
		},
		{
			name: "all succeeded, restartPolicy OnFailure",
			in: statusInput{pod: specPod(v1.RestartPolicyOnFailure, nil, "a", "b"), sandbox: sb,
				containers: map[string][]*criContainer{"a": {exited("a", "sb", 0, 0)}, "b": {exited("b", "sb", 0, 0)}}},
			checks: []check{phase(v1.PodSucceeded), cond(v1.PodReady, v1.ConditionFalse, "PodCompleted")},
		},
		{
			name: "one failed, restartPolicy Never",
			in: statusInput{pod: specPod(v1.RestartPolicyNever, nil, "a", "b"), sandbox: sb,
				containers: map[string][]*criContainer{"a": {exited("a", "sb", 0, 0)}, "b": {exited("b", "sb", 0, 1)}}},
			checks: []check{phase(v1.PodFailed)},
		},
		{
			name: "OOM killed keeps the runtime's reason",
			in: statusInput{pod: specPod(v1.RestartPolicyNever, nil, "a"), sandbox: sb,
				containers: map[string][]*criContainer{"a": {func() *criContainer { c := exited("a", "sb", 0, 137); c.reason = "OOMKilled"; return c }()}}},
			checks: []check{phase(v1.PodFailed), state("a", "terminated:OOMKilled")},
		},
		{
			name: "deleted: everything terminated",
			in: statusInput{pod: specPod(v1.RestartPolicyAlways, []string{"i"}, "a", "b"), sandbox: sb, terminated: true,
				containers: map[string][]*criContainer{"i": {exited("i", "sb", 0, 0)}, "a": {exited("a", "sb", 0, 143)}}},
			checks: []check{phase(v1.PodFailed), state("a", "terminated:Error"), state("b", "terminated:ContainerStatusUnknown"),
				cond(v1.PodReadyToStartContainers, v1.ConditionFalse, "")},
		},
		{
			name: "sidecar not started yet",
			in: statusInput{pod: withSidecar(specPod(v1.RestartPolicyNever, []string{"s", "i"}, "a"), "s"), sandbox: sb,
				containers: map[string][]*criContainer{"s": {running("s", "sb", 0)}},
				probe:      func(*v1.Container, string) (bool, bool) { return false, false }},
			checks: []check{phase(v1.PodPending), state("s", "running"), state("a", "waiting:PodInitializing"),
				cond(v1.PodInitialized, v1.ConditionFalse, "ContainersNotInitialized")},
		},
		{
			name: "sidecar restarting once initialized",
			in: statusInput{pod: withSidecar(specPod(v1.RestartPolicyNever, []string{"s", "i"}, "a"), "s"), sandbox: sb,
				containers: map[string][]*criContainer{"s": {exited("s", "sb", 1, 1), exited("s", "sb", 0, 1)},
					"i": {exited("i", "sb", 0, 0)}, "a": {running("a", "sb", 0)}},
				waiting: map[string]*waiting{"s": {reason: reasonCrashLoopBackOff}}},
			checks: []check{phase(v1.PodRunning), state("s", "waiting:CrashLoopBackOff"),
				cond(v1.PodInitialized, v1.ConditionTrue, ""), cond(v1.PodReady, v1.ConditionFalse, "ContainersNotReady")},
		},
		{
			name: "app done, sidecar stopped: the sidecar's exit counts for nothing",
			in: statusInput{pod: withSidecar(specPod(v1.RestartPolicyNever, []string{"s"}, "a"), "s"), sandbox: sb,
				containers: map[string][]*criContainer{"s": {exited("s", "sb", 0, 143)}, "a": {exited("a", "sb", 0, 0)}}},
			checks: []check{phase(v1.PodSucceeded)},
		},
		{
			name: "deleted with a sidecar",
			in: statusInput{pod: withSidecar(specPod(v1.RestartPolicyAlways, []string{"s"}, "a"), "s"), sandbox: sb, terminated: true,
				containers: map[string][]*criContainer{"s": {exited("s", "sb", 0, 143)}, "a": {exited("a", "sb", 0, 0)}}},
			checks: []check{phase(v1.PodSucceeded)},
		},
		{
			name: "image pull back-off",
			in: statusInput{pod: specPod(v1.RestartPolicyAlways, nil, "a"), sandbox: sb,
				waiting: map[string]*waiting{"a": {reason: reasonImagePullBackOff, message: "Back-off pulling image"}}},
			checks: []check{phase(v1.PodPending), state("a", "waiting:ImagePullBackOff")},
		},
		{
			name: "sandbox recreated: containers start over",
			in: statusInput{pod: specPod(v1.RestartPolicyAlways, nil, "a"), sandbox: &sandboxInfo{id: "sb2", ready: true},
				containers: map[string][]*criContainer{"a": {exited("a", "sb1", 4, 137)}}},
			checks: []check{state("a", "waiting:ContainerCreating"), func(t *testing.T, st v1.PodStatus) {
				if cs := containerStatus(st, "a"); cs.RestartCount != 5 || cs.LastTerminationState.Terminated == nil {
					t.Errorf("%+v", cs)
				}
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.now = t0
			tc.in.hostIPs = []string{"192.0.2.1"}
			st := computeStatus(tc.in)
			for _, c := range tc.checks {
				c(t, st)
			}
			if st.HostIP != "192.0.2.1" {
				t.Errorf("hostIP %q", st.HostIP)
			}
		})
	}
}

// TestStatusTransitionTimes checks that an unchanged condition keeps its
// transition time and that others' conditions are kept.
func TestStatusTransitionTimes(t *testing.T) {
	pod := specPod(v1.RestartPolicyAlways, nil, "a")
	old := metav1.NewTime(t0.Add(-time.Hour))
	pod.Status.Conditions = []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: old},
		{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: old},
		{Type: "example.com/gate", Status: v1.ConditionTrue, LastTransitionTime: old},
	}
	pod.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/gate"}}
	st := computeStatus(statusInput{pod: pod, now: t0, sandbox: &sandboxInfo{id: "sb", ready: true},
		containers: map[string][]*criContainer{"a": {running("a", "sb", 0)}}})
	got := map[v1.PodConditionType]v1.PodCondition{}
	for _, c := range st.Conditions {
		got[c.Type] = c
	}
	if !got[v1.PodScheduled].LastTransitionTime.Time.Equal(old.Time) {
		t.Errorf("PodScheduled moved: %v", got[v1.PodScheduled].LastTransitionTime)
	}
	if r := got[v1.PodReady]; r.Status != v1.ConditionTrue || !r.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("Ready %+v", r)
	}
	if _, ok := got["example.com/gate"]; !ok {
		t.Error("readiness gate condition dropped")
	}
	pod.Status.Conditions[2].Status = v1.ConditionFalse
	st = computeStatus(statusInput{pod: pod, now: t0, sandbox: &sandboxInfo{id: "sb", ready: true},
		containers: map[string][]*criContainer{"a": {running("a", "sb", 0)}}})
	for _, c := range st.Conditions {
		if c.Type == v1.PodReady && (c.Status != v1.ConditionFalse || c.Reason != "ReadinessGatesNotReady") {
			t.Errorf("Ready with a false gate: %+v", c)
		}
	}
}

// TestPodPhaseContainerRestartPolicy: with container-level restart
// policies and rules, the phase follows whether each stopped container
// runs again (kubelet's getPhase with ContainerRestartRules): Running
// while one will, else Succeeded or Failed by the exit codes.
func TestPodPhaseContainerRestartPolicy(t *testing.T) {
	always, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyNever
	on42 := []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
	terminated := func(code int32) v1.ContainerStatus {
		return v1.ContainerStatus{Name: "c", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	backingOff := func(code int32) v1.ContainerStatus {
		return v1.ContainerStatus{Name: "c", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: code}}}
	}
	for _, tc := range []struct {
		name   string
		pod    v1.RestartPolicy
		policy *v1.ContainerRestartPolicy
		rules  []v1.ContainerRestartRule
		status v1.ContainerStatus
		want   v1.PodPhase
	}{
		{"pod Always", v1.RestartPolicyAlways, nil, nil, terminated(1), v1.PodRunning},
		{"pod Never, failed", v1.RestartPolicyNever, nil, nil, terminated(1), v1.PodFailed},
		{"pod OnFailure, succeeded", v1.RestartPolicyOnFailure, nil, nil, terminated(0), v1.PodSucceeded},
		{"pod OnFailure, failed", v1.RestartPolicyOnFailure, nil, nil, terminated(1), v1.PodRunning},
		{"container Never under pod Always, failed", v1.RestartPolicyAlways, &never, nil, terminated(1), v1.PodFailed},
		{"container Never under pod Always, succeeded", v1.RestartPolicyAlways, &never, nil, terminated(0), v1.PodSucceeded},
		{"container Always under pod Never", v1.RestartPolicyNever, &always, nil, backingOff(1), v1.PodRunning},
		{"rule matches", v1.RestartPolicyNever, &never, on42, backingOff(42), v1.PodRunning},
		{"rule does not match", v1.RestartPolicyNever, &never, on42, terminated(1), v1.PodFailed},
	} {
		pod := &v1.Pod{Spec: v1.PodSpec{RestartPolicy: tc.pod,
			Containers: []v1.Container{{Name: "c", RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}}}}
		if got := podPhase(pod, nil, []v1.ContainerStatus{tc.status}, false, true); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}
