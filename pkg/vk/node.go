package vk

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// NodeConfig is what the Node object says besides what the runtime tells.
type NodeConfig struct {
	// Pods is the node's pod capacity.
	Pods int64
	// Taints go on the node (vk-cri's default keeps ordinary pods away).
	Taints []v1.Taint
	// KubeletPort is the kubelet API's port, for the API server to reach
	// logs and exec (DaemonEndpoints).
	KubeletPort int32
	// Version is vk-cri's own version, reported as the kubelet version.
	Version string
	// KubeReserved and SystemReserved are what kubelet's --kube-reserved
	// and --system-reserved say: taken off the capacity for allocatable,
	// so the scheduler leaves that much of the host to what runs beside
	// the pods (ParseReserved reads them).
	KubeReserved, SystemReserved v1.ResourceList
}

// statusPeriod is how often the runtime's Status is read for the node's
// Ready condition.
const statusPeriod = 10 * time.Second

// nodeState is the node as vk-cri reports it.
type nodeState struct {
	mu   sync.Mutex
	node *v1.Node
	cb   func(*v1.Node)
}

// ConfigureNode fills n (the node virtual-kubelet registers) with the
// node's capacity, allocatable, info, addresses, labels, taints and
// conditions. Like kubelet, it refuses reservations larger than the
// capacity.
func (p *Provider) ConfigureNode(ctx context.Context, n *v1.Node, nc NodeConfig) error {
	st, err := p.rt.Status(ctx, true)
	var info map[string]string
	if err == nil {
		info = st.GetInfo()
	}
	h := readHostInfo(p.cfg.StateDir, info)
	if !h.fromRuntime {
		klog.InfoS("The runtime reports no CPUs or memory; the node's capacity is this host's", "cpus", h.cpus, "memory", h.memoryBytes)
	}
	if h.stagesMounts {
		// Here they are on tmpfs still; there they are in the engine's
		// volumes (docs/operations.md, "Secrets on a remote engine").
		klog.InfoS("The runtime copies pods' volumes to its engine's host: secret, projected and downwardAPI files are written to disk there, in the engine's volumes, for as long as the pod's sandbox lives, not kept in memory as on this host")
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	// Only labels NodeRestriction lets a node set on itself: none under
	// kubernetes.io or k8s.io but kubelet's own (hostname, os, arch, …).
	// A role (node-role.kubernetes.io/<role>) is for the admin to set.
	n.Labels["type"] = "virtual-kubelet"
	n.Labels["kubernetes.io/hostname"] = p.cfg.NodeName
	n.Labels[v1.LabelOSStable] = h.operatingSyst
	n.Labels[v1.LabelArchStable] = h.architecture
	n.Spec.Taints = append(n.Spec.Taints, nc.Taints...)

	capacity := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewQuantity(h.cpus, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(h.memoryBytes, resource.BinarySI),
		v1.ResourcePods:   *resource.NewQuantity(nc.Pods, resource.DecimalSI),
	}
	if h.storageBytes > 0 {
		capacity[v1.ResourceEphemeralStorage] = *resource.NewQuantity(h.storageBytes, resource.BinarySI)
	}
	n.Status.Capacity = capacity
	reserved := reservation(capacity, nc.KubeReserved, nc.SystemReserved)
	if err := checkReservation(capacity, reserved); err != nil {
		return err
	}
	n.Status.Allocatable = allocatable(capacity, reserved)
	if len(reserved) > 0 {
		klog.InfoS("Node allocatable", "capacity", capacity, "reserved", reserved, "allocatable", n.Status.Allocatable)
	}
	p.setAllocatable(n.Status.Allocatable)
	p.memCapacity.Store(h.memoryBytes)
	p.notePodLevelResources(h)
	version := nc.Version
	if version == "" {
		version = "v0.0.0-vk-cri"
	}
	n.Status.NodeInfo = v1.NodeSystemInfo{
		MachineID:               h.machineID,
		SystemUUID:              h.machineID,
		BootID:                  h.bootID,
		KernelVersion:           h.kernel,
		OSImage:                 h.osImage,
		OperatingSystem:         h.operatingSyst,
		Architecture:            h.architecture,
		ContainerRuntimeVersion: p.runtimeName + "://" + p.runtimeVersion,
		KubeletVersion:          version,
	}
	n.Status.Addresses = nil
	for _, ip := range p.cfg.NodeIPs {
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: p.cfg.NodeName})
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = nc.KubeletPort
	n.Status.Phase = v1.NodeRunning
	now := metav1.NewTime(p.clock.Now())
	ready := readyCondition(st, err, now)
	p.noteRuntimeReady(ready)
	n.Status.Conditions = []v1.NodeCondition{
		ready,
		{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory",
			Message: "kubelet has sufficient memory available", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: v1.NodeDiskPressure, Status: v1.ConditionFalse, Reason: "KubeletHasNoDiskPressure",
			Message: "kubelet has no disk pressure", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: v1.NodePIDPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientPID",
			Message: "kubelet has sufficient PID available", LastHeartbeatTime: now, LastTransitionTime: now},
		{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse, Reason: "RouteCreated",
			Message: "the runtime's pod network is in place", LastHeartbeatTime: now, LastTransitionTime: now},
	}
	p.node.mu.Lock()
	p.node.node = n.DeepCopy()
	p.node.mu.Unlock()
	return nil
}

// reservation sums the reservations of the resources the node has a
// capacity of, as kubelet's container manager does: a reservation of
// anything else (pid, which is no node capacity) takes nothing.
func reservation(capacity v1.ResourceList, lists ...v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for name := range capacity {
		sum := resource.NewQuantity(0, resource.DecimalSI)
		for _, l := range lists {
			if q, ok := l[name]; ok {
				sum.Add(q)
			}
		}
		if !sum.IsZero() {
			out[name] = *sum
		}
	}
	return out
}

// checkReservation fails, in kubelet's words, when a reservation exceeds
// the capacity: kubelet does not start with such a configuration.
func checkReservation(capacity, reserved v1.ResourceList) error {
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(reserved)) {
		left := capacity[name].DeepCopy()
		left.Sub(reserved[name])
		if left.Sign() < 0 {
			c, r := capacity[name], reserved[name]
			bad = append(bad, fmt.Sprintf("Resource %q has a reservation of %v but capacity of %v. Expected capacity >= reservation.", name, r.String(), c.String()))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("invalid Node Allocatable configuration. %s", strings.Join(bad, " "))
	}
	return nil
}

// allocatable is capacity less reserved, never below zero (kubelet's
// node status does the same).
func allocatable(capacity, reserved v1.ResourceList) v1.ResourceList {
	out := make(v1.ResourceList, len(capacity))
	for name, c := range capacity {
		q := c.DeepCopy()
		if r, ok := reserved[name]; ok {
			q.Sub(r)
		}
		if q.Sign() < 0 {
			q.Set(0)
		}
		out[name] = q
	}
	return out
}

// ParseReserved parses a reservation as kubelet's --kube-reserved and
// --system-reserved take it: name=quantity pairs, comma-separated, of
// cpu, memory, ephemeral-storage and pid ("cpu=100m,memory=256Mi").
// CPU is rounded to the millicore, as kubelet does.
func ParseReserved(s string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q: malformed pair, expect name=quantity", pair)
		}
		name := v1.ResourceName(strings.TrimSpace(k))
		switch name {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, resourcePID:
		default:
			return nil, fmt.Errorf("cannot reserve %q resource", name)
		}
		v = strings.TrimSpace(v)
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("failed to parse quantity %q for %q resource: %w", v, name, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("resource quantity for %q cannot be negative: %v", name, v)
		}
		if name == v1.ResourceCPU {
			q.SetMilli((q.ScaledValue(resource.Micro) + 500) / 1000)
		}
		out[name] = q
	}
	return out, nil
}

// resourcePID is the pid reservation's name (kubelet's pidlimit.PIDs).
const resourcePID v1.ResourceName = "pid"

// readyCondition is the node's Ready condition from the runtime's Status:
// ready when the runtime and its network are.
func readyCondition(st *runtimeapi.StatusResponse, err error, now metav1.Time) v1.NodeCondition {
	c := v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
		Message: "vk-cri is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
	if err != nil {
		c.Status, c.Reason, c.Message = v1.ConditionFalse, "KubeletNotReady", fmt.Sprintf("container runtime is down: %v", err)
		return c
	}
	for _, rc := range st.GetStatus().GetConditions() {
		if (rc.Type == runtimeapi.RuntimeReady || rc.Type == runtimeapi.NetworkReady) && !rc.Status {
			c.Status, c.Reason = v1.ConditionFalse, "KubeletNotReady"
			c.Message = fmt.Sprintf("container runtime not ready: %s=false reason:%s message:%s", rc.Type, rc.Reason, rc.Message)
			return c
		}
	}
	return c
}

// Ping tells virtual-kubelet's node controller that vk-cri is alive; the
// runtime's health is the Ready condition's business (monitorRuntime).
func (p *Provider) Ping(ctx context.Context) error { return ctx.Err() }

// NotifyNodeStatus registers the callback that passes node status changes
// to virtual-kubelet.
func (p *Provider) NotifyNodeStatus(_ context.Context, cb func(*v1.Node)) {
	p.node.mu.Lock()
	defer p.node.mu.Unlock()
	p.node.cb = cb
}

// monitorRuntime reads the runtime's Status every statusPeriod (every
// second while it is not ready) and reports the node's Ready condition
// when it changes.
func (p *Provider) monitorRuntime(ctx context.Context) {
	for {
		period := statusPeriod
		if !p.nodeReady() {
			period = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(period):
		}
		sctx, cancel := context.WithTimeout(ctx, statusPeriod)
		st, err := p.rt.Status(sctx, false)
		cancel()
		if ctx.Err() != nil {
			return
		}
		p.setReady(readyCondition(st, err, metav1.NewTime(p.clock.Now())))
	}
}

func (p *Provider) nodeReady() bool {
	p.node.mu.Lock()
	defer p.node.mu.Unlock()
	if p.node.node == nil {
		return false
	}
	for _, c := range p.node.node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func (p *Provider) setReady(c v1.NodeCondition) {
	p.node.mu.Lock()
	n, cb := p.node.node, p.node.cb
	if n == nil {
		p.node.mu.Unlock()
		return
	}
	changed := false
	for i := range n.Status.Conditions {
		o := &n.Status.Conditions[i]
		if o.Type != v1.NodeReady {
			continue
		}
		if o.Status != c.Status || o.Message != c.Message {
			if o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
			}
			*o = c
			changed = true
		}
	}
	n = n.DeepCopy()
	p.node.mu.Unlock()
	p.noteRuntimeReady(c)
	if changed && cb != nil {
		klog.InfoS("Node Ready condition", "status", c.Status, "reason", c.Reason, "message", c.Message)
		cb(n)
	}
}

// ParseTaint parses key[=value]:effect.
func ParseTaint(s string) (v1.Taint, error) {
	var t v1.Taint
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return t, fmt.Errorf("taint %q: want key[=value]:effect", s)
	}
	switch e := v1.TaintEffect(s[i+1:]); e {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		t.Effect = e
	default:
		return t, fmt.Errorf("taint %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", s)
	}
	t.Key, t.Value, _ = strings.Cut(s[:i], "=")
	if t.Key == "" {
		return t, fmt.Errorf("taint %q: empty key", s)
	}
	return t, nil
}

// PortOf is the port of a host:port listen address.
func PortOf(addr string) (int32, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port of %q: %w", addr, err)
	}
	return int32(n), nil
}
