package vk

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
)

// TestWorkerRuntimeUnreachable: while the node's runtime is down, a running
// pod is reported not Ready (its last status otherwise kept), whether the
// runtime's lists fail or answer stale; when it is back, Ready again.
func TestWorkerRuntimeUnreachable(t *testing.T) {
	e := newTestEnv(t)
	w := newPodWorker(e.p, testPod())
	e.p.mu.Lock()
	e.p.workers[w.pod().UID] = w // as CreatePod does
	e.p.mu.Unlock()
	w.pass(context.Background())
	e.exit(t, "init", 0)
	w.pass(context.Background())
	if st := e.last(t).Status; condition(st, v1.PodReady) != v1.ConditionTrue {
		t.Fatalf("before: Ready %s", condition(st, v1.PodReady))
	}

	down := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionFalse}
	e.p.noteRuntimeReady(down)
	select {
	case <-w.wake:
	default:
		t.Error("the worker was not woken when the runtime went down")
	}
	e.clock.Step(time.Second)
	// One error per pass (the fake pops them): two failing passes.
	for range 2 {
		e.rt.InjectError("ListPodSandbox", status.Error(codes.Unavailable, "engine away"))
	}
	w.pass(context.Background())
	unseen := func(when string) {
		t.Helper()
		st := e.last(t).Status
		for _, ct := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
			for _, c := range st.Conditions {
				if c.Type == ct && (c.Status != v1.ConditionFalse || c.Reason != reasonRuntimeUnavailable) {
					t.Errorf("%s: %s = %s (%s), want False (%s)", when, ct, c.Status, c.Reason, reasonRuntimeUnavailable)
				}
			}
		}
		if st.Phase != v1.PodRunning || containerStatus(st, "a").State.Running == nil {
			t.Errorf("%s: phase %s, a %+v: want the last known state kept", when, st.Phase, containerStatus(st, "a").State)
		}
		if containerStatus(st, "a").Ready || containerStatus(st, "b").Ready {
			t.Errorf("%s: a container still ready", when)
		}
	}
	unseen("lists failing")
	n := len(e.notified)
	w.pass(context.Background()) // still failing: nothing new to report
	if len(e.notified) != n {
		t.Errorf("an unchanged unseen status was reported again")
	}

	// cri-compose answers lists from its store while the engine is away.
	w.pass(context.Background())
	unseen("lists answering")

	e.p.noteRuntimeReady(v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue})
	w.pass(context.Background())
	if st := e.last(t).Status; condition(st, v1.PodReady) != v1.ConditionTrue || !containerStatus(st, "a").Ready {
		t.Errorf("runtime back: Ready %s, a ready %v", condition(st, v1.PodReady), containerStatus(st, "a").Ready)
	}
}
