package vk

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestCrashBackoff follows kubelet's crash-loop back-off: the first
// restart at once, then 10 s, 20 s, 40 s … up to 5 min, counted from when
// the container exited; forgotten after 10 min without failures.
func TestCrashBackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newBackoff(clk, backoffInitial, backoffMax)
	const key = "crash/uid/c"
	var want []time.Duration
	for d := backoffInitial; len(want) < 8; d = min(2*d, backoffMax) {
		want = append(want, d)
	}
	// First exit: restart at once.
	if ok, _ := b.ready(key, clk.Now()); !ok {
		t.Fatal("first restart not immediate")
	}
	b.restarted(key, clk.Now())
	for i, d := range want {
		clk.Step(time.Second) // it ran for a second and exited
		exited := clk.Now()
		ok, wait := b.ready(key, exited)
		if ok || wait != d {
			t.Fatalf("restart %d: ready %v wait %v, want wait %v", i+2, ok, wait, d)
		}
		clk.Step(d - time.Millisecond)
		if ok, _ := b.ready(key, exited); ok {
			t.Fatalf("restart %d: ready before %v", i+2, d)
		}
		clk.Step(time.Millisecond)
		if ok, _ := b.ready(key, exited); !ok {
			t.Fatalf("restart %d: not ready after %v", i+2, d)
		}
		b.restarted(key, exited)
	}
	// Ten quiet minutes: back to the start.
	clk.Step(2*backoffMax + time.Second)
	if ok, _ := b.ready(key, clk.Now()); !ok {
		t.Fatal("not ready after a long quiet time")
	}
	b.restarted(key, clk.Now())
	clk.Step(time.Second)
	if _, wait := b.ready(key, clk.Now()); wait != backoffInitial {
		t.Errorf("wait after reset %v, want %v", wait, backoffInitial)
	}
}

func TestPullBackoff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	b := newBackoff(clk, backoffInitial, backoffMax)
	if ok, _ := b.retryReady("pull/x"); !ok {
		t.Fatal("never failed, yet not ready")
	}
	b.failed("pull/x", clk.Now())
	if ok, wait := b.retryReady("pull/x"); ok || wait != backoffInitial {
		t.Fatalf("after a failure: %v %v", ok, wait)
	}
	clk.Step(backoffInitial)
	if ok, _ := b.retryReady("pull/x"); !ok {
		t.Fatal("not ready after the back-off")
	}
	b.failed("pull/x", clk.Now())
	if _, wait := b.retryReady("pull/x"); wait != 2*backoffInitial {
		t.Errorf("second wait %v", wait)
	}
	b.reset("pull/x")
	if ok, _ := b.retryReady("pull/x"); !ok {
		t.Error("not ready after reset")
	}
}

func TestContainerShouldRestart(t *testing.T) {
	always, onFailure, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicyOnFailure, v1.ContainerRestartPolicyNever
	rule := func(action v1.ContainerRestartRuleAction, op v1.ContainerRestartRuleOnExitCodesOperator, codes ...int32) v1.ContainerRestartRule {
		return v1.ContainerRestartRule{Action: action, ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
	}
	restartOn42 := []v1.ContainerRestartRule{rule(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpIn, 42)}
	for _, tc := range []struct {
		name   string
		pod    v1.RestartPolicy
		policy *v1.ContainerRestartPolicy
		rules  []v1.ContainerRestartRule
		code   int32
		want   bool
	}{
		{"pod Always, exit 0", v1.RestartPolicyAlways, nil, nil, 0, true},
		{"pod Always, exit 1", v1.RestartPolicyAlways, nil, nil, 1, true},
		{"pod OnFailure, exit 0", v1.RestartPolicyOnFailure, nil, nil, 0, false},
		{"pod OnFailure, exit 137", v1.RestartPolicyOnFailure, nil, nil, 137, true},
		{"pod Never, exit 0", v1.RestartPolicyNever, nil, nil, 0, false},
		{"pod Never, exit 1", v1.RestartPolicyNever, nil, nil, 1, false},
		{"container Never under pod Always", v1.RestartPolicyAlways, &never, nil, 1, false},
		{"container Always under pod Never", v1.RestartPolicyNever, &always, nil, 1, true},
		{"container OnFailure, exit 0", v1.RestartPolicyAlways, &onFailure, nil, 0, false},
		{"container OnFailure, exit 2", v1.RestartPolicyNever, &onFailure, nil, 2, true},
		{"rule In matches", v1.RestartPolicyNever, &never, restartOn42, 42, true},
		{"rule In does not match", v1.RestartPolicyNever, &never, restartOn42, 1, false},
		{"rule NotIn matches", v1.RestartPolicyNever, &never,
			[]v1.ContainerRestartRule{rule(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1)}, 3, true},
		{"rule NotIn does not match", v1.RestartPolicyNever, &never,
			[]v1.ContainerRestartRule{rule(v1.ContainerRestartRuleActionRestart, v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1)}, 1, false},
		{"no match falls to the container's policy", v1.RestartPolicyNever, &always, restartOn42, 1, true},
		{"RestartAllContainers falls through (gate off)", v1.RestartPolicyNever, &never,
			[]v1.ContainerRestartRule{rule(v1.ContainerRestartRuleActionRestartAllContainers, v1.ContainerRestartRuleOnExitCodesOpIn, 42)}, 42, false},
		{"rules without a container policy are not read", v1.RestartPolicyNever, nil, restartOn42, 42, false},
	} {
		c := &v1.Container{Name: "c", RestartPolicy: tc.policy, RestartPolicyRules: tc.rules}
		if got := containerShouldRestart(c, &v1.PodSpec{RestartPolicy: tc.pod}, tc.code); got != tc.want {
			t.Errorf("%s: containerShouldRestart = %v, want %v", tc.name, got, tc.want)
		}
	}
}
