package vk

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func startCount(t *testing.T) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := podStartDuration.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestObservePodStart(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(created.Add(1500 * time.Millisecond))
	p := &Provider{clock: clk, workers: map[types.UID]*podWorker{}}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", CreationTimestamp: metav1.NewTime(created)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c1"}, {Name: "c2"}}},
	}
	yes, no := true, false
	running := func(started ...*bool) *v1.PodStatus {
		st := &v1.PodStatus{Phase: v1.PodRunning}
		for _, s := range started {
			st.ContainerStatuses = append(st.ContainerStatuses, v1.ContainerStatus{Started: s})
		}
		return st
	}

	w := &podWorker{p: p, startTime: clk.Now()}
	n0, sum0 := startCount(t)
	w.observePodStart(pod, v1.PodPending, &v1.PodStatus{Phase: v1.PodPending})
	w.observePodStart(pod, v1.PodPending, running(&yes, &no))
	if n, _ := startCount(t); n != n0 {
		t.Fatalf("counted a pod with a container not started: %d samples, want %d", n, n0)
	}
	w.observePodStart(pod, v1.PodPending, running(&yes, &yes))
	w.observePodStart(pod, v1.PodRunning, running(&yes, &yes)) // once only
	n, sum := startCount(t)
	if n != n0+1 || sum-sum0 != 1.5 {
		t.Fatalf("after start: %d samples (+%v s), want %d (+1.5 s)", n, sum-sum0, n0+1)
	}

	// A pod already Running when its worker first reports was adopted.
	adopted := &podWorker{p: p, startTime: clk.Now()}
	adopted.observePodStart(pod, v1.PodRunning, running(&yes, &yes))
	if n2, _ := startCount(t); n2 != n {
		t.Fatalf("counted an adopted pod")
	}
}

func TestProviderMetrics(t *testing.T) {
	p := &Provider{clock: clocktesting.NewFakeClock(time.Now()), workers: map[types.UID]*podWorker{}}
	w := &podWorker{p: p, wake: make(chan struct{}, 1)}
	p.workers["u1"] = w
	p.workers["u2"] = &podWorker{p: p, wake: make(chan struct{}, 1)}
	w.poke()
	p.node.node = &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	before := testutil.ToFloat64(probeResults.WithLabelValues(ProbeLiveness, ProbeFailure))
	recordProbe(ProbeLiveness, ProbeFailure)
	if got := testutil.ToFloat64(probeResults.WithLabelValues(ProbeLiveness, ProbeFailure)); got != before+1 {
		t.Fatalf("probe counter %v, want %v", got, before+1)
	}
	mfs, err := p.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge() != nil {
			got[mf.GetName()] = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{"vkcri_pod_workers": 2, "vkcri_pod_workers_pending": 1, "vkcri_node_ready": 1} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
