package cri

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Collectors are the runtime's Prometheus metrics, read from the store and
// the log pumps when scraped:
//
//	cri_compose_pods{state}                      pod sandboxes by state (ready, notready)
//	cri_compose_containers{state}                containers by state (created, running, exited, unknown)
//	cri_compose_log_pumps                        log pumps following an engine log stream
//	cri_compose_log_pump_bytes_total{stream}     bytes of CRI log records written (stdout, stderr)
//	cri_compose_log_pump_dropped_total           log writes that failed (the pump asks the engine again when it resumes)
//	cri_compose_log_dropped_lines_total          log lines dropped because the log's filesystem was full (never written)
//	cri_compose_log_pump_fetches_total{by}       fetches of engine logs by the pumps, by their tail or by time alone
//
// The engine client has its own (dockerapi.Client.Collectors), and the gRPC
// server's come from the middleware the program installs (pkg/metrics).
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{&runtimeCollector{s: s}}
}

var (
	podsDesc = prometheus.NewDesc("cri_compose_pods",
		"Pod sandboxes this runtime owns, by state.", []string{"state"}, nil)
	containersDesc = prometheus.NewDesc("cri_compose_containers",
		"Containers this runtime owns, by state.", []string{"state"}, nil)
	logPumpsDesc = prometheus.NewDesc("cri_compose_log_pumps",
		"Log pumps currently following a container's engine log stream.", nil, nil)
	logBytesDesc = prometheus.NewDesc("cri_compose_log_pump_bytes_total",
		"Bytes of CRI log records the log pumps wrote, by stream.", []string{"stream"}, nil)
	logDroppedDesc = prometheus.NewDesc("cri_compose_log_pump_dropped_total",
		"Log writes that did not reach the container's log file (failed write or closed file); "+
			"the pump asks the engine for them again when it resumes.", nil, nil)
	logDroppedLinesDesc = prometheus.NewDesc("cri_compose_log_dropped_lines_total",
		"CRI log lines (records) dropped because the log file's filesystem was full or over quota; "+
			"they are never written. Each container's log says once when it fills and once when it takes lines again.", nil, nil)
	logFetchesDesc = prometheus.NewDesc("cri_compose_log_pump_fetches_total",
		"Fetches of engine logs by the log pumps: by the log's tail (by=\"tail\"), which costs the engine what is fetched, "+
			"or by time alone (by=\"time\"), for which it reads the container's whole log.", []string{"by"}, nil)
)

// runtimeCollector reads the store and the log pumps on every scrape.
type runtimeCollector struct{ s *Server }

func (c *runtimeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{podsDesc, containersDesc, logPumpsDesc, logBytesDesc, logDroppedDesc, logDroppedLinesDesc, logFetchesDesc} {
		ch <- d
	}
}

func (c *runtimeCollector) Collect(ch chan<- prometheus.Metric) {
	pods := map[string]int{}
	for _, st := range []runtime.PodSandboxState{runtime.PodSandboxState_SANDBOX_READY, runtime.PodSandboxState_SANDBOX_NOTREADY} {
		pods[stateLabel(st.String(), "SANDBOX_")] = 0
	}
	for _, r := range c.s.store.Sandboxes(nil) {
		pods[stateLabel(r.State.String(), "SANDBOX_")]++
	}
	ctrs := map[string]int{}
	for v := range runtime.ContainerState_name {
		ctrs[stateLabel(runtime.ContainerState(v).String(), "CONTAINER_")] = 0
	}
	for _, r := range c.s.store.Containers(nil) {
		ctrs[stateLabel(r.State.String(), "CONTAINER_")]++
	}
	for st, n := range pods {
		ch <- prometheus.MustNewConstMetric(podsDesc, prometheus.GaugeValue, float64(n), st)
	}
	for st, n := range ctrs {
		ch <- prometheus.MustNewConstMetric(containersDesc, prometheus.GaugeValue, float64(n), st)
	}

	l := c.s.pumps
	ch <- prometheus.MustNewConstMetric(logPumpsDesc, prometheus.GaugeValue, float64(l.running()))
	ch <- prometheus.MustNewConstMetric(logBytesDesc, prometheus.CounterValue, float64(l.counters.StdoutBytes.Load()), "stdout")
	ch <- prometheus.MustNewConstMetric(logBytesDesc, prometheus.CounterValue, float64(l.counters.StderrBytes.Load()), "stderr")
	ch <- prometheus.MustNewConstMetric(logDroppedDesc, prometheus.CounterValue, float64(l.counters.Dropped.Load()))
	ch <- prometheus.MustNewConstMetric(logDroppedLinesDesc, prometheus.CounterValue, float64(l.counters.DroppedLines.Load()))
	ch <- prometheus.MustNewConstMetric(logFetchesDesc, prometheus.CounterValue, float64(l.counters.TailFetches.Load()), "tail")
	ch <- prometheus.MustNewConstMetric(logFetchesDesc, prometheus.CounterValue, float64(l.counters.TimeFetches.Load()), "time")
}

// stateLabel turns a CRI state name (SANDBOX_READY, CONTAINER_EXITED) into
// a label value (ready, exited).
func stateLabel(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

// running counts the pumps that have not ended.
func (l *logPumps) running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.pumps {
		select {
		case <-p.done:
		default:
			n++
		}
	}
	return n
}
