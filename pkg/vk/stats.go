package vk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// /stats/summary from CRI, as kubelet's CRI stats provider builds it: the
// pods' and containers' numbers are the runtime's (ListPodSandboxStats, or
// ListContainerStats summed per pod where the runtime lacks the former);
// the node's are /proc's on the host vk-cri runs on, which is the
// runtime's host when the CRI endpoint is a local socket (the usual way
// to run it). A virtual node has no cAdvisor to ask.

// nodeCPU keeps the last node CPU sample, for usageNanoCores.
type nodeCPU struct {
	mu   sync.Mutex
	at   time.Time
	used uint64 // core-nanoseconds
}

// GetStatsSummary is the kubelet API's /stats/summary.
func (p *Provider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	node, err := p.nodeStats()
	if err != nil {
		// Pods' numbers are still worth serving; metrics-server skips
		// a node without CPU or memory.
		klog.ErrorS(err, "Reading the node's usage from /proc")
	}
	node.NodeName = p.cfg.NodeName
	pods, err := p.podStats(ctx)
	if err != nil {
		return nil, err
	}
	return &statsv1alpha1.Summary{Node: node, Pods: pods}, nil
}

func (p *Provider) nodeStats() (statsv1alpha1.NodeStats, error) {
	var ns statsv1alpha1.NodeStats
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return ns, err
	}
	st, err := fs.Stat()
	if err != nil {
		return ns, err
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return ns, err
	}
	now := p.clock.Now()
	ns.StartTime = metav1.Unix(int64(st.BootTime), 0)
	c := st.CPUTotal
	used := uint64((c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal) * 1e9)
	cpu := &statsv1alpha1.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: &used}
	p.nodeCPU.mu.Lock()
	if dt := now.Sub(p.nodeCPU.at); !p.nodeCPU.at.IsZero() && dt > 0 && used >= p.nodeCPU.used {
		rate := uint64(float64(used-p.nodeCPU.used) / dt.Seconds())
		cpu.UsageNanoCores = &rate
	}
	p.nodeCPU.at, p.nodeCPU.used = now, used
	p.nodeCPU.mu.Unlock()
	ns.CPU = cpu
	if mi.MemTotalBytes != nil && mi.MemFreeBytes != nil {
		// cAdvisor's root cgroup numbers: usage is what is not free,
		// the working set that less the inactive page cache.
		usage := *mi.MemTotalBytes - *mi.MemFreeBytes
		ws := usage
		if mi.InactiveFileBytes != nil && *mi.InactiveFileBytes < ws {
			ws -= *mi.InactiveFileBytes
		}
		mem := &statsv1alpha1.MemoryStats{Time: metav1.NewTime(now), UsageBytes: &usage, WorkingSetBytes: &ws}
		if mi.MemAvailableBytes != nil {
			mem.AvailableBytes = mi.MemAvailableBytes
		}
		ns.Memory = mem
	}
	return ns, nil
}

// podStats is the node's pods' stats: those of the ready sandboxes vk-cri
// made for this node, with their running containers.
func (p *Provider) podStats(ctx context.Context) ([]statsv1alpha1.PodStats, error) {
	sel := map[string]string{labelNode: p.cfg.NodeName}
	sbs, err := p.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		LabelSelector: sel, State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	ctrs, err := p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		LabelSelector: sel, State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	running := make(map[string]*runtimeapi.Container, len(ctrs))
	for _, c := range ctrs {
		running[c.Id] = c
	}
	sbStats, err := p.rt.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{LabelSelector: sel})
	if isUnimplemented(err) {
		sbStats, err = p.sandboxStatsFromContainers(ctx, sel)
	}
	if err != nil {
		return nil, fmt.Errorf("list pod sandbox stats: %w", err)
	}
	byID := make(map[string]*runtimeapi.PodSandboxStats, len(sbStats))
	for _, s := range sbStats {
		byID[s.GetAttributes().GetId()] = s
	}
	pods := make([]statsv1alpha1.PodStats, 0, len(sbs))
	for _, sb := range sbs {
		md := sb.GetMetadata()
		ps := statsv1alpha1.PodStats{
			PodRef:    statsv1alpha1.PodReference{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()},
			StartTime: metav1.NewTime(time.Unix(0, sb.CreatedAt)),
		}
		lx := byID[sb.Id].GetLinux()
		ps.CPU = cpuStats(lx.GetCpu())
		ps.Memory = memoryStats(lx.GetMemory())
		ps.Network = networkStats(lx.GetNetwork())
		if n := lx.GetProcess().GetProcessCount(); n != nil {
			ps.ProcessStats = &statsv1alpha1.ProcessStats{ProcessCount: &n.Value}
		}
		for _, cs := range lx.GetContainers() {
			c, ok := running[cs.GetAttributes().GetId()]
			if !ok || c.PodSandboxId != sb.Id {
				continue
			}
			ps.Containers = append(ps.Containers, statsv1alpha1.ContainerStats{
				Name:      c.GetMetadata().GetName(),
				StartTime: metav1.NewTime(time.Unix(0, c.CreatedAt)),
				CPU:       cpuStats(cs.GetCpu()),
				Memory:    memoryStats(cs.GetMemory()),
				Rootfs:    fsStats(cs.GetWritableLayer()),
			})
		}
		pods = append(pods, ps)
	}
	return pods, nil
}

// sandboxStatsFromContainers is ListPodSandboxStats for runtimes that lack
// it: each pod's containers, with the pod's CPU and memory their sums.
func (p *Provider) sandboxStatsFromContainers(ctx context.Context, sel map[string]string) ([]*runtimeapi.PodSandboxStats, error) {
	cs, err := p.rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	ctrs, err := p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	sandboxOf := make(map[string]string, len(ctrs))
	for _, c := range ctrs {
		sandboxOf[c.Id] = c.PodSandboxId
	}
	bySandbox := map[string]*runtimeapi.PodSandboxStats{}
	var out []*runtimeapi.PodSandboxStats
	for _, c := range cs {
		sb := sandboxOf[c.GetAttributes().GetId()]
		if sb == "" {
			continue
		}
		s, ok := bySandbox[sb]
		if !ok {
			s = &runtimeapi.PodSandboxStats{Attributes: &runtimeapi.PodSandboxAttributes{Id: sb}, Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:    &runtimeapi.CpuUsage{UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}, UsageNanoCores: &runtimeapi.UInt64Value{}},
				Memory: &runtimeapi.MemoryUsage{WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{}, RssBytes: &runtimeapi.UInt64Value{}},
			}}
			bySandbox[sb] = s
			out = append(out, s)
		}
		lx := s.Linux
		lx.Containers = append(lx.Containers, c)
		lx.Cpu.Timestamp = max(lx.Cpu.Timestamp, c.GetCpu().GetTimestamp())
		lx.Cpu.UsageCoreNanoSeconds.Value += c.GetCpu().GetUsageCoreNanoSeconds().GetValue()
		lx.Cpu.UsageNanoCores.Value += c.GetCpu().GetUsageNanoCores().GetValue()
		lx.Memory.Timestamp = max(lx.Memory.Timestamp, c.GetMemory().GetTimestamp())
		lx.Memory.WorkingSetBytes.Value += c.GetMemory().GetWorkingSetBytes().GetValue()
		lx.Memory.UsageBytes.Value += c.GetMemory().GetUsageBytes().GetValue()
		lx.Memory.RssBytes.Value += c.GetMemory().GetRssBytes().GetValue()
	}
	return out, nil
}

func u64(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	x := v.Value
	return &x
}

func cpuStats(c *runtimeapi.CpuUsage) *statsv1alpha1.CPUStats {
	if c == nil {
		return nil
	}
	return &statsv1alpha1.CPUStats{Time: metav1.NewTime(time.Unix(0, c.Timestamp)),
		UsageCoreNanoSeconds: u64(c.UsageCoreNanoSeconds), UsageNanoCores: u64(c.UsageNanoCores)}
}

func memoryStats(m *runtimeapi.MemoryUsage) *statsv1alpha1.MemoryStats {
	if m == nil {
		return nil
	}
	return &statsv1alpha1.MemoryStats{Time: metav1.NewTime(time.Unix(0, m.Timestamp)),
		AvailableBytes: u64(m.AvailableBytes), UsageBytes: u64(m.UsageBytes), WorkingSetBytes: u64(m.WorkingSetBytes),
		RSSBytes: u64(m.RssBytes), PageFaults: u64(m.PageFaults), MajorPageFaults: u64(m.MajorPageFaults)}
}

func networkStats(n *runtimeapi.NetworkUsage) *statsv1alpha1.NetworkStats {
	if n == nil {
		return nil
	}
	iface := func(i *runtimeapi.NetworkInterfaceUsage) statsv1alpha1.InterfaceStats {
		return statsv1alpha1.InterfaceStats{Name: i.GetName(), RxBytes: u64(i.GetRxBytes()), RxErrors: u64(i.GetRxErrors()),
			TxBytes: u64(i.GetTxBytes()), TxErrors: u64(i.GetTxErrors())}
	}
	out := &statsv1alpha1.NetworkStats{Time: metav1.NewTime(time.Unix(0, n.Timestamp))}
	if n.DefaultInterface != nil {
		out.InterfaceStats = iface(n.DefaultInterface)
		out.Interfaces = append(out.Interfaces, out.InterfaceStats)
	}
	for _, i := range n.Interfaces {
		out.Interfaces = append(out.Interfaces, iface(i))
	}
	return out
}

func fsStats(f *runtimeapi.FilesystemUsage) *statsv1alpha1.FsStats {
	if f == nil {
		return nil
	}
	return &statsv1alpha1.FsStats{Time: metav1.NewTime(time.Unix(0, f.Timestamp)), UsedBytes: u64(f.UsedBytes), InodesUsed: u64(f.InodesUsed)}
}
