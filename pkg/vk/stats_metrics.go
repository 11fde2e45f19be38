package vk

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// /metrics/resource, kubelet's resource metrics (what metrics-server
// scrapes): the same names, labels and sample timestamps as kubelet's
// resource metrics collector, made from the same numbers as
// /stats/summary.
var (
	nodeCPUDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"Current working set of the node in bytes", nil, nil)
	containerCPUDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	containerStartDesc = prometheus.NewDesc("container_start_time_seconds",
		"Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
	podCPUDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	scrapeErrorDesc = prometheus.NewDesc("scrape_error",
		"1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

// resourceCollector collects one scrape's resource metrics.
type resourceCollector struct {
	ctx context.Context
	p   *Provider
}

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemDesc, containerCPUDesc, containerMemDesc,
		containerStartDesc, podCPUDesc, podMemDesc, scrapeErrorDesc} {
		ch <- d
	}
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.p.GetStatsSummary(c.ctx)
	scrapeErr := 0.0
	if err != nil {
		klog.ErrorS(err, "Collecting resource metrics")
		scrapeErr = 1
	}
	ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, scrapeErr)
	if s == nil {
		return
	}
	emitCPU := func(d *prometheus.Desc, cpu *statsv1alpha1.CPUStats, lv ...string) {
		if cpu == nil || cpu.UsageCoreNanoSeconds == nil {
			return
		}
		ch <- prometheus.NewMetricWithTimestamp(cpu.Time.Time,
			prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(*cpu.UsageCoreNanoSeconds)/float64(time.Second), lv...))
	}
	emitMem := func(d *prometheus.Desc, mem *statsv1alpha1.MemoryStats, lv ...string) {
		if mem == nil || mem.WorkingSetBytes == nil {
			return
		}
		ch <- prometheus.NewMetricWithTimestamp(mem.Time.Time,
			prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(*mem.WorkingSetBytes), lv...))
	}
	emitCPU(nodeCPUDesc, s.Node.CPU)
	emitMem(nodeMemDesc, s.Node.Memory)
	for _, pod := range s.Pods {
		emitCPU(podCPUDesc, pod.CPU, pod.PodRef.Name, pod.PodRef.Namespace)
		emitMem(podMemDesc, pod.Memory, pod.PodRef.Name, pod.PodRef.Namespace)
		for _, ctr := range pod.Containers {
			emitCPU(containerCPUDesc, ctr.CPU, ctr.Name, pod.PodRef.Name, pod.PodRef.Namespace)
			emitMem(containerMemDesc, ctr.Memory, ctr.Name, pod.PodRef.Name, pod.PodRef.Namespace)
			ch <- prometheus.NewMetricWithTimestamp(ctr.StartTime.Time, prometheus.MustNewConstMetric(containerStartDesc,
				prometheus.GaugeValue, float64(ctr.StartTime.UnixNano())/float64(time.Second), ctr.Name, pod.PodRef.Name, pod.PodRef.Namespace))
		}
	}
}

// GetMetricsResource is the kubelet API's /metrics/resource, each
// sample's labels from the outside in (namespace, pod, container).
func (p *Provider) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(resourceCollector{ctx: ctx, p: p}); err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	labelsOutsideIn(mfs)
	return mfs, err
}

// resourceLabelRank orders the resource metrics' labels from the outside
// in: namespace, pod, container. For the pod metrics that is kubelet's
// own order (the registry's, by name); for the container metrics kubelet
// gives the container first. Clients that go by name (metrics-server,
// Prometheus) read any order the same, and those that take a label by
// position, as virtual-kubelet's provider suite does (the pod's name
// second, for pod and container metrics alike), find the pod where they
// look.
var resourceLabelRank = map[string]int{"namespace": 0, "pod": 1, "container": 2}

// labelsOutsideIn puts every sample's labels in resourceLabelRank's order.
func labelsOutsideIn(mfs []*dto.MetricFamily) {
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			slices.SortStableFunc(m.Label, func(a, b *dto.LabelPair) int {
				return resourceLabelRank[a.GetName()] - resourceLabelRank[b.GetName()]
			})
		}
	}
}
