package vk

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
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

// TestReadyCondition: the node is not Ready when the runtime cannot be
// reached at all (cri-compose gone) or says its runtime or network is not
// ready (cri-compose up, its engine gone).
func TestReadyCondition(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st := func(rt, nw bool) *runtimeapi.StatusResponse {
		return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
			{Type: runtimeapi.RuntimeReady, Status: rt, Reason: "EngineUnavailable", Message: "ping engine: connection refused"},
			{Type: runtimeapi.NetworkReady, Status: nw},
		}}}
	}
	for _, tc := range []struct {
		name string
		st   *runtimeapi.StatusResponse
		err  error
		want v1.ConditionStatus
		msg  string
	}{
		{"ready", st(true, true), nil, v1.ConditionTrue, "posting ready"},
		{"cri-compose gone", nil, status.Error(codes.Unavailable, "connection refused"), v1.ConditionFalse, "container runtime is down"},
		{"engine gone", st(false, false), nil, v1.ConditionFalse, "RuntimeReady=false reason:EngineUnavailable"},
		{"network gone", st(true, false), nil, v1.ConditionFalse, "NetworkReady=false"},
	} {
		c := readyCondition(tc.st, tc.err, now)
		if c.Type != v1.NodeReady || c.Status != tc.want || !strings.Contains(c.Message, tc.msg) {
			t.Errorf("%s: %s=%s %q, want %s and a message with %q", tc.name, c.Type, c.Status, c.Message, tc.want, tc.msg)
		}
	}
}
