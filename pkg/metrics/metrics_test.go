package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/metrics"
	"github.com/cri-compose/cri-compose/test/suite"
)

// TestMetricsAfterPodLifecycle runs one pod through a real gRPC client on a
// real engine, scrapes /metrics over HTTP as Prometheus would, parses the
// text with Prometheus' own parser and checks that the counters moved.
func TestMetricsAfterPodLifecycle(t *testing.T) {
	m := metrics.New()
	env := suite.StartServer(t, suite.ServerOptions{GRPC: m.ServerOptions()})
	if err := m.Register(env.Docker.Collectors()...); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(env.Srv.Collectors()...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + metrics.Path

	var during map[string]*dto.MetricFamily
	env.Lifecycle(ctx, "metrics", func() { during = scrape(t, url) })
	// One error, for the code label.
	_, err = env.RT.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: "no-such-container"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("ContainerStatus of nothing: %v, want NotFound", err)
	}
	after := scrape(t, url)

	// Pods and containers by state, while the pod ran with its exited container.
	expectValue(t, during, "cri_compose_pods", labels{"state": "ready"}, 1)
	expectValue(t, during, "cri_compose_containers", labels{"state": "exited"}, 1)
	expectValue(t, during, "cri_compose_containers", labels{"state": "running"}, 0)
	// and after it was removed.
	expectValue(t, after, "cri_compose_pods", labels{"state": "ready"}, 0)
	expectValue(t, after, "cri_compose_pods", labels{"state": "notready"}, 0)
	expectValue(t, after, "cri_compose_containers", labels{"state": "exited"}, 0)

	// Per-RPC counts, codes and latencies (go-grpc-middleware).
	rs := "runtime.v1.RuntimeService"
	for _, method := range []string{"RunPodSandbox", "CreateContainer", "StartContainer", "StopContainer",
		"RemoveContainer", "StopPodSandbox", "RemovePodSandbox"} {
		expectValue(t, after, "grpc_server_started_total", labels{"grpc_service": rs, "grpc_method": method}, 1)
		expectValue(t, after, "grpc_server_handled_total", labels{"grpc_service": rs, "grpc_method": method, "grpc_code": "OK"}, 1)
		expectCount(t, after, "grpc_server_handling_seconds", labels{"grpc_service": rs, "grpc_method": method}, 1, 1)
	}
	expectValue(t, after, "grpc_server_handled_total", labels{"grpc_service": rs, "grpc_method": "ContainerStatus", "grpc_code": "NotFound"}, 1)

	// Engine calls by operation: a sandbox and a container each created,
	// started and removed.
	for _, op := range []string{"create container", "start container", "remove container"} {
		expectCount(t, after, "cri_compose_engine_request_duration_seconds", labels{"operation": op, "result": "ok"}, 2, 1e9)
	}
	expectCount(t, after, "cri_compose_engine_request_duration_seconds", labels{"operation": "inspect container", "result": "ok"}, 1, 1e9)

	// The event stream: events arrived (lag observed), no reconnect.
	expectCount(t, after, "cri_compose_engine_event_lag_seconds", nil, 1, 1e9)
	expectValue(t, after, "cri_compose_engine_event_stream_reconnects_total", nil, 0)

	// The log pump wrote the container's two lines and dropped nothing.
	expectAtLeast(t, after, "cri_compose_log_pump_bytes_total", labels{"stream": "stdout"}, float64(len("hello from cri-compose")))
	expectAtLeast(t, after, "cri_compose_log_pump_bytes_total", labels{"stream": "stderr"}, float64(len("to stderr")))
	expectValue(t, after, "cri_compose_log_pump_dropped_total", nil, 0)
	expectValue(t, after, "cri_compose_log_dropped_lines_total", nil, 0)
	expectValue(t, after, "cri_compose_log_pumps", nil, 0)

	if t.Failed() || testing.Verbose() {
		t.Logf("metrics after one pod lifecycle:\n%s", sample(t, url))
	}
}

type labels map[string]string

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// find returns the one metric of family name whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want labels) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Errorf("no metric family %s", name)
		return nil
	}
	var found []*dto.Metric
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && have[k] == v
		}
		if ok {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Errorf("%s%v: %d series match, want 1", name, want, len(found))
		return nil
	}
	return found[0]
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
	return -1
}

func expectValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, l labels, want float64) {
	t.Helper()
	if m := find(t, fams, name, l); m != nil && value(m) != want {
		t.Errorf("%s%v = %v, want %v", name, l, value(m), want)
	}
}

func expectAtLeast(t *testing.T, fams map[string]*dto.MetricFamily, name string, l labels, min float64) {
	t.Helper()
	if m := find(t, fams, name, l); m != nil && value(m) < min {
		t.Errorf("%s%v = %v, want at least %v", name, l, value(m), min)
	}
}

// expectCount checks a histogram's sample count is in [lo, hi] and its sum
// positive.
func expectCount(t *testing.T, fams map[string]*dto.MetricFamily, name string, l labels, lo, hi uint64) {
	t.Helper()
	m := find(t, fams, name, l)
	if m == nil {
		return
	}
	h := m.GetHistogram()
	if h == nil {
		t.Errorf("%s%v is not a histogram", name, l)
		return
	}
	if n := h.GetSampleCount(); n < lo || n > hi {
		t.Errorf("%s%v count = %d, want %d..%d", name, l, n, lo, hi)
	}
	if h.GetSampleSum() <= 0 {
		t.Errorf("%s%v sum = %v, want > 0", name, l, h.GetSampleSum())
	}
}

// sample is the scrape's cri-compose and RPC lines, for the log.
func sample(t *testing.T, url string) string {
	var b strings.Builder
	fams := scrape(t, url)
	names := make([]string, 0, len(fams))
	for n := range fams {
		if strings.HasPrefix(n, "cri_compose_") || strings.HasPrefix(n, "grpc_server_handled") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		for _, m := range fams[n].GetMetric() {
			if m.GetHistogram() != nil {
				fmt.Fprintf(&b, "%s_count%s %d\n", n, labelString(m), m.GetHistogram().GetSampleCount())
				continue
			}
			if v := value(m); v != 0 || strings.HasPrefix(n, "cri_compose_") {
				fmt.Fprintf(&b, "%s%s %v\n", n, labelString(m), v)
			}
		}
	}
	return b.String()
}

func labelString(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		if l.GetName() == "grpc_type" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	if len(parts) == 0 {
		return ""
	}
	return "{" + strings.Join(parts, ",") + "}"
}
