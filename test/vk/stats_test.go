package vk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"
)

const (
	mib = 1 << 20
	// hogScript holds at least 64 MiB of anonymous memory: tail keeps
	// the one (newline-free) line it has read.
	hogScript = "(dd if=/dev/zero bs=1M count=64 2>/dev/null; sleep 3600) | tail -n 1"
	// burnScript keeps one core busy.
	burnScript = "while :; do :; done"
)

// kubeletFetch GETs path from vk-cri's kubelet API directly, as
// metrics-server does (it scrapes each node's address, not through the
// API server, whose node proxy also refuses the loopback address this
// suite's node has), with the client certificate the API server uses.
func kubeletFetch(t *testing.T, path string) ([]byte, error) {
	t.Helper()
	code, body := kubeletGet(t, path, kubeletClient[:], "")
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %.500s", path, code, body)
	}
	return []byte(body), nil
}

// scrape parses a Prometheus text page from the node's kubelet API.
func scrape(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	b, err := kubeletFetch(t, path)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse %v: %v\n%s", path, err, b)
	}
	return mfs
}

// sample is the value of the family's sample whose labels include want,
// and whether there is one.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (*dto.Metric, bool) {
	mf, ok := mfs[name]
	if !ok {
		return nil, false
	}
next:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// TestTop: /stats/summary and /metrics/resource, fetched from the node as
// metrics-server fetches them for `kubectl top`, show a pod that burns
// CPU and holds memory with the numbers it uses; then a real
// metrics-server, registered with the API server, serves them as
// `kubectl top pod` and `kubectl top node` read them.
func TestTop(t *testing.T) {
	need(t)
	ns := namespace(t)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "top", Namespace: ns},
		Spec: v1.PodSpec{Containers: []v1.Container{busybox("burn", burnScript), busybox("hog", hogScript)},
			TerminationGracePeriodSeconds: new(int64)},
	})
	waitFor(t, "pod Running", 2*time.Minute, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodRunning && condition(p, v1.ContainersReady) == v1.ConditionTrue, podSummary(p)
	})

	// The summary: wait until the runtime has sampled the pod twice (a
	// CPU rate needs two samples) and the hog holds its memory.
	var ps statsv1alpha1.PodStats
	var node statsv1alpha1.NodeStats
	waitFor(t, "the pod's CPU and memory in /stats/summary", time.Minute, func() (bool, string) {
		b, err := kubeletFetch(t, "/stats/summary")
		if err != nil {
			return false, err.Error()
		}
		var s statsv1alpha1.Summary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("decode summary: %v\n%s", err, b)
		}
		node = s.Node
		for _, p := range s.Pods {
			if p.PodRef.UID != string(pod.UID) {
				continue
			}
			ps = p
			c := containerStats(p, "hog")
			return p.CPU != nil && p.CPU.UsageNanoCores != nil && *p.CPU.UsageNanoCores > 0.05e9 &&
				c != nil && c.Memory != nil && c.Memory.WorkingSetBytes != nil && *c.Memory.WorkingSetBytes > 60*mib, string(b)
		}
		return false, fmt.Sprintf("pod %s not in the summary: %s", pod.UID, b)
	})
	if ps.PodRef.Name != "top" || ps.PodRef.Namespace != ns {
		t.Errorf("pod ref %+v", ps.PodRef)
	}
	if ps.StartTime.IsZero() || time.Since(ps.StartTime.Time) > 5*time.Minute {
		t.Errorf("pod start time %v", ps.StartTime)
	}
	if ps.Memory == nil || ps.Memory.WorkingSetBytes == nil || *ps.Memory.WorkingSetBytes < 60*mib {
		t.Errorf("pod memory %+v", ps.Memory)
	}
	burn := containerStats(ps, "burn")
	if burn == nil || burn.CPU == nil || burn.CPU.UsageCoreNanoSeconds == nil || *burn.CPU.UsageCoreNanoSeconds == 0 ||
		burn.CPU.UsageNanoCores == nil || *burn.CPU.UsageNanoCores < 0.05e9 {
		t.Errorf("burn container's CPU: %+v", burn)
	}
	if len(ps.Containers) != 2 {
		t.Errorf("%d containers in the pod's stats, want 2", len(ps.Containers))
	}
	if node.NodeName != nodeName || node.CPU == nil || node.CPU.UsageCoreNanoSeconds == nil || *node.CPU.UsageCoreNanoSeconds == 0 ||
		node.Memory == nil || node.Memory.WorkingSetBytes == nil || *node.Memory.WorkingSetBytes == 0 {
		t.Errorf("node stats: %+v", node)
	}

	// The resource metrics, with kubelet's names, labels and timestamps.
	mfs := scrape(t, "/metrics/resource")
	podLabels := map[string]string{"pod": "top", "namespace": ns}
	withContainer := func(name string) map[string]string {
		return map[string]string{"pod": "top", "namespace": ns, "container": name}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"node_cpu_usage_seconds_total", nil, 0.001},
		{"node_memory_working_set_bytes", nil, 1},
		{"pod_cpu_usage_seconds_total", podLabels, 0.001},
		{"pod_memory_working_set_bytes", podLabels, 60 * mib},
		{"container_cpu_usage_seconds_total", withContainer("burn"), 0.001},
		{"container_memory_working_set_bytes", withContainer("hog"), 60 * mib},
		{"container_start_time_seconds", withContainer("burn"), float64(time.Now().Add(-5 * time.Minute).Unix())},
	} {
		m, ok := sample(mfs, c.name, c.labels)
		if !ok {
			t.Errorf("no %s%v in /metrics/resource", c.name, c.labels)
			continue
		}
		if v := value(m); v < c.min {
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, v, c.min)
		}
		if m.GetTimestampMs() == 0 {
			t.Errorf("%s%v has no timestamp (metrics-server needs one)", c.name, c.labels)
		}
	}
	if m, ok := sample(mfs, "scrape_error", nil); !ok || value(m) != 0 {
		t.Errorf("scrape_error: %v", m)
	}

	// And `kubectl top`: metrics-server scrapes the node, and the API
	// server serves what it made of it (the metrics.k8s.io API that
	// kubectl top reads).
	t.Run("kubectl top", func(t *testing.T) {
		startMetricsServer(t)
		mc, err := metricsclient.NewForConfig(restConfig)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var pm *metricsv1beta1.PodMetrics
		waitFor(t, "kubectl top pod: the pod's CPU and memory", 2*time.Minute, func() (bool, string) {
			pm, err = mc.MetricsV1beta1().PodMetricses(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var burnCPU, hogMem int64
			for _, c := range pm.Containers {
				switch c.Name {
				case "burn":
					burnCPU = c.Usage.Cpu().MilliValue()
				case "hog":
					hogMem = c.Usage.Memory().Value()
				}
			}
			return len(pm.Containers) == 2 && burnCPU >= 50 && hogMem >= 60*mib,
				fmt.Sprintf("%+v", pm.Containers)
		})
		for _, c := range pm.Containers {
			t.Logf("kubectl top pod %s: container %s cpu %v memory %v (window %v)", pod.Name, c.Name, c.Usage.Cpu(), c.Usage.Memory(), pm.Window.Duration)
		}
		waitFor(t, "kubectl top node", time.Minute, func() (bool, string) {
			nm, err := mc.MetricsV1beta1().NodeMetricses().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return nm.Usage.Cpu().MilliValue() > 0 && nm.Usage.Memory().Value() > 0, fmt.Sprintf("%+v", nm.Usage)
		})
	})
}

func containerStats(p statsv1alpha1.PodStats, name string) *statsv1alpha1.ContainerStats {
	for i := range p.Containers {
		if p.Containers[i].Name == name {
			return &p.Containers[i]
		}
	}
	return nil
}

// TestVKMetrics: vk-cri's own metrics at the kubelet API's /metrics move
// with one pod's lifecycle (a pod with a readiness probe, created, Ready,
// deleted, gone).
func TestVKMetrics(t *testing.T) {
	need(t)
	counter := func(mfs map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
		m, ok := sample(mfs, name, labels)
		if !ok {
			return 0
		}
		return value(m)
	}
	starts := func(mfs map[string]*dto.MetricFamily) uint64 {
		m, ok := sample(mfs, "vkcri_pod_start_duration_seconds", nil)
		if !ok {
			return 0
		}
		return m.GetHistogram().GetSampleCount()
	}
	before := scrape(t, "/metrics")

	ns := namespace(t)
	main := busybox("main", "sleep 3600")
	main.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle", Namespace: ns},
		Spec:       v1.PodSpec{Containers: []v1.Container{main}, TerminationGracePeriodSeconds: new(int64)},
	})
	waitFor(t, "pod Running", 2*time.Minute, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue, podSummary(p)
	})
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod removed", 2*time.Minute, func() (bool, string) {
		return len(sandboxes(t, string(pod.UID))) == 0, "sandbox still there"
	})

	// The sandbox is gone in the runtime a moment before vk-cri counts
	// the RemovePodSandbox call that answered: scrape until all moved.
	moving := []struct {
		name   string
		labels map[string]string
	}{
		{"vkcri_cri_requests_total", map[string]string{"method": "RunPodSandbox", "code": "OK"}},
		{"vkcri_cri_requests_total", map[string]string{"method": "CreateContainer", "code": "OK"}},
		{"vkcri_cri_requests_total", map[string]string{"method": "StartContainer", "code": "OK"}},
		{"vkcri_cri_requests_total", map[string]string{"method": "StopPodSandbox", "code": "OK"}},
		{"vkcri_cri_requests_total", map[string]string{"method": "RemovePodSandbox", "code": "OK"}},
		{"vkcri_probe_results_total", map[string]string{"probe_type": "readiness", "result": "success"}},
	}
	var after map[string]*dto.MetricFamily
	waitFor(t, "vk-cri's counters to move", 30*time.Second, func() (bool, string) {
		after = scrape(t, "/metrics")
		for _, c := range moving {
			if b, a := counter(before, c.name, c.labels), counter(after, c.name, c.labels); a <= b {
				return false, fmt.Sprintf("%s%v did not move: %v before, %v after", c.name, c.labels, b, a)
			}
		}
		return true, ""
	})
	if m, ok := sample(after, "vkcri_cri_request_duration_seconds", map[string]string{"method": "RunPodSandbox"}); !ok ||
		m.GetHistogram().GetSampleCount() == 0 || m.GetHistogram().GetSampleSum() <= 0 {
		t.Errorf("RunPodSandbox latency: %v", m)
	}
	if b, a := starts(before), starts(after); a <= b {
		t.Errorf("vkcri_pod_start_duration_seconds count did not move: %d before, %d after", b, a)
	}
	if v := counter(after, "vkcri_node_ready", nil); v != 1 {
		t.Errorf("vkcri_node_ready = %v, want 1", v)
	}
	if _, ok := sample(after, "vkcri_pod_workers", nil); !ok {
		t.Error("no vkcri_pod_workers")
	}
}
