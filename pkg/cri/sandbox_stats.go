package cri

import (
	"context"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStats answers from the sampler's memory (stats.go).
func (s *Server) PodSandboxStats(ctx context.Context, r *runtime.PodSandboxStatsRequest) (*runtime.PodSandboxStatsResponse, error) {
	sb, err := s.store.Sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, grpcError(err)
	}
	s.stats.fresh()
	return &runtime.PodSandboxStatsResponse{Stats: s.stats.podStats(sb, s.store.ContainersOf(sb.ID))}, nil
}

// ListPodSandboxStats answers from the sampler's memory for every sandbox
// that the filter selects.
func (s *Server) ListPodSandboxStats(ctx context.Context, r *runtime.ListPodSandboxStatsRequest) (*runtime.ListPodSandboxStatsResponse, error) {
	f := r.GetFilter()
	s.stats.fresh()
	byPod := map[string][]containerRec{}
	for _, c := range s.store.Containers(nil) {
		byPod[c.SandboxID] = append(byPod[c.SandboxID], c)
	}
	var out []*runtime.PodSandboxStats
	for _, sb := range s.store.Sandboxes(nil) {
		if f.GetId() != "" && !strings.HasPrefix(sb.ID, f.GetId()) {
			continue
		}
		if !matchLabels(f.GetLabelSelector(), sb.Config.GetLabels()) {
			continue
		}
		out = append(out, s.stats.podStats(sb, byPod[sb.ID]))
	}
	return &runtime.ListPodSandboxStatsResponse{Stats: out}, nil
}

// podStats: the pod's CPU and memory are its own cgroup's when kubelet gave
// it a cgroup parent, else the sum of its infra and running containers
// (whose cumulative CPU then drops when a container ends); its network is
// the infra container's namespace's.
func (c *statsCollector) podStats(sb sandboxRec, ctrs []containerRec) *runtime.PodSandboxStats {
	lx := &runtime.LinuxPodSandboxStats{}
	for _, ct := range ctrs {
		lx.Containers = append(lx.Containers, c.containerStats(ct))
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
func (c *statsCollector) podSample(sb sandboxRec, ctrs []containerRec) (usageSample, bool) {
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
