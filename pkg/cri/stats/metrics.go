package stats

import (
	"context"
	"strconv"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Metrics are the metrics that MetricDescriptors describes, of every
// ready pod of pods (with its containers, ctrs by pod id), built from the
// same samples as the stats. Pod-level metrics (the pod's network, and its
// CPU and memory) carry an empty container label and the sandbox id, as
// cAdvisor's pod cgroup does. Each metric's timestamp is its sample's: the
// values are cached. Counters of seconds are whole seconds (CRI metric
// values are integers). oomEvents counts the engine's OOM events of a
// container, for a kernel whose cgroup keeps no count.
//
// While metrics are asked for (FreshMetrics), the sampler also reads what
// only they need (cgroupExtra: CPU split and throttling, memory details,
// tasks, open files, block I/O, the cgroup's limits).
func (c *Collector) Metrics(ctx context.Context, pods []Pod, ctrs map[string][]Container, oomEvents func(id string) uint64) []*runtime.PodSandboxMetrics {
	fsCap, hasCap := c.layers.capacity(ctx)
	var out []*runtime.PodSandboxMetrics
	for _, sb := range pods {
		if sb.State != runtime.PodSandboxState_SANDBOX_READY {
			continue
		}
		pm := c.podMetrics(sb, ctrs[sb.ID])
		for _, ct := range runningOf(ctrs[sb.ID]) {
			m := c.containerMetrics(ctx, sb, ct)
			if hasCap {
				m.capacity(fsCap)
			}
			if m.oomFromEvents {
				m.add(mOOMEvents, runtime.MetricType_COUNTER, oomEvents(ct.ID))
			}
			pm.ContainerMetrics = append(pm.ContainerMetrics, &runtime.ContainerMetrics{ContainerId: ct.ID, Metrics: m.out})
		}
		out = append(out, pm)
	}
	return out
}

func runningOf(ctrs []Container) []Container {
	var out []Container
	for _, ct := range ctrs {
		if ct.State == runtime.ContainerState_CONTAINER_RUNNING {
			out = append(out, ct)
		}
	}
	return out
}

// metricSet accumulates metrics sharing base label values.
type metricSet struct {
	at     int64
	labels []string
	out    []*runtime.Metric
	// oomFromEvents: the cgroup gave no OOM kill count; the caller counts
	// the engine's events instead.
	oomFromEvents bool
}

func (m *metricSet) add(name string, typ runtime.MetricType, v uint64, extra ...string) {
	lv := m.labels
	if len(extra) > 0 {
		lv = withKeys(m.labels, extra...)
	}
	m.out = append(m.out, &runtime.Metric{Name: name, Timestamp: m.at, MetricType: typ, LabelValues: lv,
		Value: &runtime.UInt64Value{Value: v}})
}

const (
	counter = runtime.MetricType_COUNTER
	gauge   = runtime.MetricType_GAUGE
)

// usage adds the CPU, memory and process metrics of one sample.
func (m *metricSet) usage(s usageSample) {
	m.at = s.at
	m.add(mCPUUsage, counter, s.cpu/1e9)
	m.add(mMemoryUsage, gauge, s.mem.usage)
	m.add(mMemoryWorkingSet, gauge, s.mem.workingSet)
	m.add(mMemoryRSS, gauge, s.mem.rss)
	m.add(mMemoryCache, gauge, s.mem.cache)
	m.add(mMemoryFailures, counter, s.mem.pgfault, "pgfault", "container")
	m.add(mMemoryFailures, counter, s.mem.pgmajfault, "pgmajfault", "container")
	m.add(mSpecMemoryLimit, gauge, s.mem.limit)
	switch {
	case s.ext != nil && s.ext.hasProcs:
		m.add(mProcesses, gauge, s.ext.procs) // processes, where pids.current counts threads
	case s.hasProcs:
		m.add(mProcesses, gauge, s.procs)
	}
}

// extra adds the metrics-only figures of a container's sample.
func (m *metricSet) extra(x *cgroupExtra) {
	if x.hasCPUSplit {
		m.add(mCPUUser, counter, x.cpuUser/1e9)
		m.add(mCPUSystem, counter, x.cpuSystem/1e9)
	}
	if x.hasCFS {
		m.add(mCFSPeriods, counter, x.cfsPeriods)
		m.add(mCFSThrottled, counter, x.cfsThrottled)
		m.add(mCFSThrottledSecs, counter, x.cfsThrottledNanos/1e9)
	}
	m.add(mMemoryMappedFile, gauge, x.mappedFile)
	m.add(mMemorySwap, gauge, x.swap)
	if x.hasKernel {
		m.add(mMemoryKernel, gauge, x.kernel)
	}
	if x.hasMaxUsage {
		m.add(mMemoryMaxUsage, gauge, x.maxUsage)
	}
	if x.hasFailcnt {
		m.add(mMemoryFailcnt, counter, x.failcnt)
	}
	if x.hasOOM {
		m.add(mOOMEvents, counter, x.oomKills)
	} else {
		m.oomFromEvents = true
	}
	if x.hasThreads {
		m.add(mThreads, gauge, x.threads)
		m.add(mThreadsMax, gauge, x.threadsMax)
	}
	if x.hasProcs {
		m.add(mFileDescriptors, gauge, x.fds)
		m.add(mSockets, gauge, x.sockets)
	}
	if sp := x.spec; sp.hasCPU {
		m.add(mSpecCPUPeriod, gauge, sp.cpuPeriod)
		m.add(mSpecCPUShares, gauge, sp.cpuShares)
		if sp.cpuQuota > 0 {
			m.add(mSpecCPUQuota, gauge, sp.cpuQuota)
		}
	}
	if sp := x.spec; sp.hasMem {
		m.add(mSpecMemorySwap, gauge, sp.memSwapLimit)
		m.add(mSpecMemoryReserve, gauge, sp.memReservation)
	}
	for i, b := range x.blkio {
		dev := x.blkioNames[i]
		maj, min := strconv.FormatUint(b.major, 10), strconv.FormatUint(b.minor, 10)
		if b.hasBytes {
			m.add(mBlkioUsage, counter, b.readBytes, dev, maj, min, "Read")
			m.add(mBlkioUsage, counter, b.writeBytes, dev, maj, min, "Write")
			m.add(mFsReadsBytes, counter, b.readBytes, dev)
			m.add(mFsWritesBytes, counter, b.writeBytes, dev)
		}
		if b.hasServiced {
			m.add(mFsReads, counter, b.reads, dev)
			m.add(mFsWrites, counter, b.writes, dev)
		}
	}
}

// capacity adds the size of the filesystem that holds the writable layer.
func (m *metricSet) capacity(c fsCapacity) {
	m.at = time.Now().UnixNano()
	dev := c.mount
	m.add(mFsLimit, gauge, c.bytes, dev)
	m.add(mFsInodesTotal, gauge, c.inodes, dev)
	m.add(mFsInodesFree, gauge, c.inodesFree, dev)
}

// podMetrics are a ready pod's own metrics: its CPU and memory, and its
// network (the infra container's namespace).
func (c *Collector) podMetrics(sb Pod, ctrs []Container) *runtime.PodSandboxMetrics {
	md := sb.Config.GetMetadata()
	pm := &runtime.PodSandboxMetrics{PodSandboxId: sb.ID}
	pod := &metricSet{labels: []string{md.GetName(), md.GetNamespace(), "", sb.ID, ""}}
	if s, ok := c.podSample(sb, ctrs); ok {
		pod.usage(s)
	}
	if s, ok := c.sample(sb.ID); ok && s.hasNet {
		pod.at = s.at
		for _, i := range s.net {
			pod.add(mNetRxBytes, counter, i.rxBytes, i.name)
			pod.add(mNetRxPackets, counter, i.rxPackets, i.name)
			pod.add(mNetRxErrors, counter, i.rxErrors, i.name)
			pod.add(mNetRxDropped, counter, i.rxDropped, i.name)
			pod.add(mNetTxBytes, counter, i.txBytes, i.name)
			pod.add(mNetTxPackets, counter, i.txPackets, i.name)
			pod.add(mNetTxErrors, counter, i.txErrors, i.name)
			pod.add(mNetTxDropped, counter, i.txDropped, i.name)
		}
	}
	pm.Metrics = pod.out
	return pm
}

// containerMetrics are one running container's metrics. A container that
// started after the sampler's last pass is sampled, and its writable layer
// measured, on the spot.
func (c *Collector) containerMetrics(ctx context.Context, sb Pod, ct Container) *metricSet {
	md := sb.Config.GetMetadata()
	image := ct.Config.GetImage().GetUserSpecifiedImage()
	if image == "" {
		image = ct.Image
	}
	m := &metricSet{labels: []string{md.GetName(), md.GetNamespace(), ct.Config.GetMetadata().GetName(), ct.ID, image}}
	if s, ok := c.sampleOf(ct.ID, ct.Pid); ok {
		m.usage(s)
		m.add(mLastSeen, gauge, uint64(s.at/1e9))
		if s.ext != nil {
			m.extra(s.ext)
		}
	}
	if ct.StartedAt > 0 {
		m.add(mStartTime, gauge, uint64(ct.StartedAt/1e9))
	}
	if fu := c.layers.usageNow(ctx, ct.ID); fu != nil {
		m.at = fu.GetTimestamp()
		dev := fu.GetFsId().GetMountpoint()
		m.add(mFsUsage, gauge, fu.GetUsedBytes().GetValue(), dev)
		if fu.GetInodesUsed() != nil {
			m.add(mFsInodesUsed, gauge, fu.GetInodesUsed().GetValue(), dev)
		}
	}
	return m
}
