package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandboxMetrics returns, for every ready pod, the metrics that
// ListMetricDescriptors describes, built from the same samples as the stats
// RPCs. Pod-level metrics (the pod's network, and its CPU and memory) carry
// an empty container label and the sandbox id, as cAdvisor's pod cgroup
// does. Each metric's timestamp is its sample's: the values are cached.
// CPU seconds are whole seconds (CRI metric values are integers).
func (s *Server) ListPodSandboxMetrics(ctx context.Context, _ *runtime.ListPodSandboxMetricsRequest) (*runtime.ListPodSandboxMetricsResponse, error) {
	s.stats.fresh()
	byPod := map[string][]containerRec{}
	for _, c := range s.store.listContainers() {
		byPod[c.SandboxID] = append(byPod[c.SandboxID], c)
	}
	var out []*runtime.PodSandboxMetrics
	for _, sb := range s.store.listSandboxes() {
		if sb.State != runtime.PodSandboxState_SANDBOX_READY {
			continue
		}
		out = append(out, s.stats.podMetrics(sb, byPod[sb.ID]))
	}
	return &runtime.ListPodSandboxMetricsResponse{PodMetrics: out}, nil
}

// metricSet accumulates metrics sharing base label values.
type metricSet struct {
	at     int64
	labels []string
	out    []*runtime.Metric
}

func (m *metricSet) add(name string, typ runtime.MetricType, v uint64, extra ...string) {
	lv := m.labels
	if len(extra) > 0 {
		lv = withKeys(m.labels, extra...)
	}
	m.out = append(m.out, &runtime.Metric{Name: name, Timestamp: m.at, MetricType: typ, LabelValues: lv,
		Value: &runtime.UInt64Value{Value: v}})
}

// usage adds the CPU, memory and process metrics of one sample.
func (m *metricSet) usage(s usageSample) {
	m.at = s.at
	m.add(mCPUUsage, runtime.MetricType_COUNTER, s.cpu/1e9)
	m.add(mMemoryUsage, runtime.MetricType_GAUGE, s.mem.usage)
	m.add(mMemoryWorkingSet, runtime.MetricType_GAUGE, s.mem.workingSet)
	m.add(mMemoryRSS, runtime.MetricType_GAUGE, s.mem.rss)
	m.add(mMemoryCache, runtime.MetricType_GAUGE, s.mem.cache)
	m.add(mMemoryFailures, runtime.MetricType_COUNTER, s.mem.pgfault, "pgfault", "container")
	m.add(mMemoryFailures, runtime.MetricType_COUNTER, s.mem.pgmajfault, "pgmajfault", "container")
	m.add(mSpecMemoryLimit, runtime.MetricType_GAUGE, s.mem.limit)
	if s.hasProcs {
		m.add(mProcesses, runtime.MetricType_GAUGE, s.procs)
	}
}

func (c *statsCollector) podMetrics(sb sandboxRec, ctrs []containerRec) *runtime.PodSandboxMetrics {
	md := sb.Config.GetMetadata()
	pm := &runtime.PodSandboxMetrics{PodSandboxId: sb.ID}
	pod := &metricSet{labels: []string{md.GetName(), md.GetNamespace(), "", sb.ID, ""}}
	if s, ok := c.podSample(sb, ctrs); ok {
		pod.usage(s)
	}
	if s, ok := c.sample(sb.ID); ok && s.hasNet {
		pod.at = s.at
		for _, i := range s.net {
			pod.add(mNetRxBytes, runtime.MetricType_COUNTER, i.rxBytes, i.name)
			pod.add(mNetRxPackets, runtime.MetricType_COUNTER, i.rxPackets, i.name)
			pod.add(mNetRxErrors, runtime.MetricType_COUNTER, i.rxErrors, i.name)
			pod.add(mNetRxDropped, runtime.MetricType_COUNTER, i.rxDropped, i.name)
			pod.add(mNetTxBytes, runtime.MetricType_COUNTER, i.txBytes, i.name)
			pod.add(mNetTxPackets, runtime.MetricType_COUNTER, i.txPackets, i.name)
			pod.add(mNetTxErrors, runtime.MetricType_COUNTER, i.txErrors, i.name)
			pod.add(mNetTxDropped, runtime.MetricType_COUNTER, i.txDropped, i.name)
		}
	}
	pm.Metrics = pod.out
	for _, ct := range ctrs {
		if ct.State != runtime.ContainerState_CONTAINER_RUNNING {
			continue
		}
		image := ct.Config.GetImage().GetUserSpecifiedImage()
		if image == "" {
			image = ct.Image
		}
		m := &metricSet{labels: []string{md.GetName(), md.GetNamespace(), ct.Config.GetMetadata().GetName(), ct.ID, image}}
		if s, ok := c.sample(ct.ID); ok {
			m.usage(s)
			m.add(mLastSeen, runtime.MetricType_GAUGE, uint64(s.at/1e9))
		}
		if ct.StartedAt > 0 {
			m.add(mStartTime, runtime.MetricType_GAUGE, uint64(ct.StartedAt/1e9))
		}
		if fu := c.layers.usage(ct.ID); fu != nil {
			m.at = fu.GetTimestamp()
			dev := fu.GetFsId().GetMountpoint()
			m.add(mFsUsage, runtime.MetricType_GAUGE, fu.GetUsedBytes().GetValue(), dev)
			if fu.GetInodesUsed() != nil {
				m.add(mFsInodesUsed, runtime.MetricType_GAUGE, fu.GetInodesUsed().GetValue(), dev)
			}
		}
		pm.ContainerMetrics = append(pm.ContainerMetrics, &runtime.ContainerMetrics{ContainerId: ct.ID, Metrics: m.out})
	}
	return pm
}
