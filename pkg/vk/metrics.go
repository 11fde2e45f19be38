package vk

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	v1 "k8s.io/api/core/v1"
)

// vk-cri's own metrics, served at the kubelet API's /metrics and
// on --metrics-bind-address. Counters that any part of the package moves
// live in one package-level registry; what belongs to one provider (its
// workers, its node) is read at scrape time by providerCollector.
var (
	metricsRegistry = prometheus.NewRegistry()

	probeResults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vkcri_probe_results_total",
		Help: "Probe results by probe type (liveness, readiness, startup) and result (success, failure, unknown), as kubelet's prober_probe_total.",
	}, []string{"probe_type", "result"})

	podStartDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "vkcri_pod_start_duration_seconds",
		Help: "Time from a pod's creation to Running with all its containers started, image pulls included, as kubelet's pod_start_duration_seconds.",
		// kubelet's buckets for pod_start_sli_duration_seconds.
		Buckets: []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600},
	})

	criRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vkcri_cri_requests_total",
		Help: "CRI calls made to the runtime, by method and gRPC code.",
	}, []string{"method", "code"})

	criDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vkcri_cri_request_duration_seconds",
		Help:    "Latency of CRI calls made to the runtime, by method (streams excluded).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"method"})
)

func init() {
	metricsRegistry.MustRegister(probeResults, podStartDuration, criRequests, criDuration,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Probe types and results for recordProbe.
const (
	ProbeLiveness  = "liveness"
	ProbeReadiness = "readiness"
	ProbeStartup   = "startup"

	ProbeSuccess = "success"
	ProbeFailure = "failure"
	ProbeUnknown = "unknown"
)

// recordProbe counts one probe result (probeType: ProbeLiveness…;
// result: ProbeSuccess, ProbeFailure or ProbeUnknown).
func recordProbe(probeType, result string) {
	probeResults.WithLabelValues(probeType, result).Inc()
}

// observePodStart records the pod's start latency the first time st shows
// it Running with every container started. A pod that was already Running
// when this worker first reported (adopted after a restart of vk-cri) is
// not counted: its start was not ours to time.
func (w *podWorker) observePodStart(pod *v1.Pod, prev v1.PodPhase, st *v1.PodStatus) {
	if w.startTimed {
		return
	}
	if !w.reported {
		w.reported = true
		if prev == v1.PodRunning {
			w.startTimed = true
			return
		}
	}
	if st.Phase != v1.PodRunning || len(st.ContainerStatuses) < len(pod.Spec.Containers) {
		return
	}
	for _, cs := range st.ContainerStatuses {
		if cs.Started == nil || !*cs.Started {
			return
		}
	}
	w.startTimed = true
	from := pod.CreationTimestamp.Time
	if from.IsZero() {
		from = w.startTime
	}
	podStartDuration.Observe(w.p.clock.Since(from).Seconds())
}

// providerCollector reads a provider's state when scraped.
type providerCollector struct{ p *Provider }

var (
	podWorkersDesc = prometheus.NewDesc("vkcri_pod_workers",
		"Pod workers, one per pod this node runs or is removing.", nil, nil)
	podWorkersPendingDesc = prometheus.NewDesc("vkcri_pod_workers_pending",
		"Pod workers with work queued or under way (the pod worker queue depth).", nil, nil)
	nodeReadyDesc = prometheus.NewDesc("vkcri_node_ready",
		"1 when the node's Ready condition is True (the runtime and its network are ready), else 0.", nil, nil)
)

func (c providerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- podWorkersDesc
	ch <- podWorkersPendingDesc
	ch <- nodeReadyDesc
}

func (c providerCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.Lock()
	workers := make([]*podWorker, 0, len(c.p.workers))
	for _, w := range c.p.workers {
		workers = append(workers, w)
	}
	c.p.mu.Unlock()
	pending := 0
	for _, w := range workers {
		w.mu.Lock()
		busy := w.cancelPass != nil // a pass is running
		w.mu.Unlock()
		if busy || len(w.wake) > 0 {
			pending++
		}
	}
	ready := 0.0
	if c.p.nodeReady() {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(podWorkersDesc, prometheus.GaugeValue, float64(len(workers)))
	ch <- prometheus.MustNewConstMetric(podWorkersPendingDesc, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(nodeReadyDesc, prometheus.GaugeValue, ready)
}

// Gatherer is vk-cri's metrics: the package's and this provider's.
func (p *Provider) Gatherer() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(providerCollector{p})
	return prometheus.Gatherers{metricsRegistry, reg}
}

// MetricsHandler serves Gatherer in the Prometheus text format, for the
// kubelet API's /metrics and --metrics-bind-address.
func (p *Provider) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(p.Gatherer(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 30 * time.Second})
}
