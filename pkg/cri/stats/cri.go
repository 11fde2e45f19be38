package stats

import (
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Container is what the stats of one container are built from: the
// runtime's record of it.
type Container struct {
	ID        string
	Pid       int // of its process while it runs
	State     runtime.ContainerState
	Config    *runtime.ContainerConfig
	StartedAt int64  // Unix ns; 0: never started
	Image     string // the image it runs, when the config names none
}

// Pod is what the stats of one pod are built from: the runtime's record of
// its sandbox.
type Pod struct {
	ID     string
	State  runtime.PodSandboxState
	Config *runtime.PodSandboxConfig
}

// ContainerStats are one container's: CPU and memory while it runs (a
// container that started after the sampler's last pass is sampled on the
// spot), its writable layer always.
func (c *Collector) ContainerStats(ct Container) *runtime.ContainerStats {
	cfg := ct.Config
	st := &runtime.ContainerStats{
		Attributes: &runtime.ContainerAttributes{Id: ct.ID, Metadata: cfg.GetMetadata(),
			Labels: cfg.GetLabels(), Annotations: cfg.GetAnnotations()},
		WritableLayer: c.layers.usage(ct.ID),
	}
	if ct.State == runtime.ContainerState_CONTAINER_RUNNING {
		if smp, ok := c.sampleOf(ct.ID, ct.Pid); ok {
			st.Cpu, st.Memory = cpuUsage(smp), memoryUsage(smp)
		}
	}
	return st
}

// PodStats are one pod's, with those of its containers ctrs. The pod's CPU
// and memory are its own cgroup's when kubelet gave it a cgroup parent,
// else the sum of its infra and running containers (whose cumulative CPU
// then drops when a container ends); its network is the infra container's
// namespace's.
func (c *Collector) PodStats(sb Pod, ctrs []Container) *runtime.PodSandboxStats {
	lx := &runtime.LinuxPodSandboxStats{}
	for _, ct := range ctrs {
		lx.Containers = append(lx.Containers, c.ContainerStats(ct))
	}
	st := &runtime.PodSandboxStats{
		Attributes: &runtime.PodSandboxAttributes{Id: sb.ID, Metadata: sb.Config.GetMetadata(),
			Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations()},
		Linux: lx,
	}
	if sb.State != runtime.PodSandboxState_SANDBOX_READY {
		return st
	}
	infra, hasInfra := c.sample(sb.ID)
	pod, ok := c.podSample(sb, ctrs)
	if ok {
		lx.Cpu, lx.Memory = cpuUsage(pod), memoryUsage(pod)
		if pod.hasProcs {
			lx.Process = &runtime.ProcessUsage{Timestamp: pod.at, ProcessCount: &runtime.UInt64Value{Value: pod.procs}}
		}
	}
	if hasInfra && infra.hasNet {
		lx.Network = networkUsage(infra)
	}
	return st
}

// podSample is the pod cgroup's sample, or the sum of its members'.
func (c *Collector) podSample(sb Pod, ctrs []Container) (usageSample, bool) {
	if s, ok := c.sample(podKey + sb.ID); ok {
		return s, true
	}
	sum, ok := c.sample(sb.ID)
	if !ok {
		return usageSample{}, false
	}
	sum.net, sum.hasNet = nil, false
	sum.mem.limit = 0
	for _, ct := range ctrs {
		if ct.State != runtime.ContainerState_CONTAINER_RUNNING {
			continue
		}
		s, ok := c.sample(ct.ID)
		if !ok {
			continue
		}
		sum.at = max(sum.at, s.at)
		sum.cpu += s.cpu
		sum.nanoCores += s.nanoCores
		sum.hasRate = sum.hasRate && s.hasRate
		sum.mem.usage += s.mem.usage
		sum.mem.workingSet += s.mem.workingSet
		sum.mem.rss += s.mem.rss
		sum.mem.cache += s.mem.cache
		sum.mem.pgfault += s.mem.pgfault
		sum.mem.pgmajfault += s.mem.pgmajfault
		sum.procs += s.procs
		sum.hasProcs = sum.hasProcs && s.hasProcs
	}
	return sum, true
}

func cpuUsage(s usageSample) *runtime.CpuUsage {
	u := &runtime.CpuUsage{Timestamp: s.at, UsageCoreNanoSeconds: &runtime.UInt64Value{Value: s.cpu}}
	if s.hasRate {
		u.UsageNanoCores = &runtime.UInt64Value{Value: s.nanoCores}
	}
	return u
}

func memoryUsage(s usageSample) *runtime.MemoryUsage {
	m := &runtime.MemoryUsage{
		Timestamp:       s.at,
		WorkingSetBytes: &runtime.UInt64Value{Value: s.mem.workingSet},
		UsageBytes:      &runtime.UInt64Value{Value: s.mem.usage},
		RssBytes:        &runtime.UInt64Value{Value: s.mem.rss},
		PageFaults:      &runtime.UInt64Value{Value: s.mem.pgfault},
		MajorPageFaults: &runtime.UInt64Value{Value: s.mem.pgmajfault},
	}
	if s.mem.limit > 0 {
		m.AvailableBytes = &runtime.UInt64Value{Value: sub(s.mem.limit, s.mem.workingSet)}
	}
	return m
}

func networkUsage(s usageSample) *runtime.NetworkUsage {
	n := &runtime.NetworkUsage{Timestamp: s.at}
	for _, i := range s.net {
		u := &runtime.NetworkInterfaceUsage{Name: i.name,
			RxBytes: &runtime.UInt64Value{Value: i.rxBytes}, RxErrors: &runtime.UInt64Value{Value: i.rxErrors},
			TxBytes: &runtime.UInt64Value{Value: i.txBytes}, TxErrors: &runtime.UInt64Value{Value: i.txErrors}}
		if i.name == defaultInterface {
			n.DefaultInterface = u
		} else {
			n.Interfaces = append(n.Interfaces, u)
		}
	}
	return n
}

// defaultInterface is the pod's interface on the engine's bridge.
const defaultInterface = "eth0"
