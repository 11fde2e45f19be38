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

func TestShouldRestart(t *testing.T) {
	for _, tc := range []struct {
		policy v1.RestartPolicy
		code   int32
		want   bool
	}{
		{v1.RestartPolicyAlways, 0, true}, {v1.RestartPolicyAlways, 1, true},
		{v1.RestartPolicyOnFailure, 0, false}, {v1.RestartPolicyOnFailure, 137, true},
		{v1.RestartPolicyNever, 0, false}, {v1.RestartPolicyNever, 1, false},
	} {
		if got := shouldRestart(tc.policy, tc.code); got != tc.want {
			t.Errorf("shouldRestart(%s, %d) = %v", tc.policy, tc.code, got)
		}
	}
}
