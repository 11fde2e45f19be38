package cri

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// RuntimeConfig reports the engine's cgroup driver, so kubelet can match it.
func (s *Server) RuntimeConfig(ctx context.Context, r *runtime.RuntimeConfigRequest) (*runtime.RuntimeConfigResponse, error) {
	info, err := s.docker.Info(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	driver := runtime.CgroupDriver_CGROUPFS
	if info.CgroupDriver == "systemd" {
		driver = runtime.CgroupDriver_SYSTEMD
	}
	return &runtime.RuntimeConfigResponse{Linux: &runtime.LinuxRuntimeConfiguration{CgroupDriver: driver}}, nil
}

// UpdateRuntimeConfig puts the pod network on the node's pod CIDR, as a
// CNI plugin's host-local IPAM would: kubelet sends the node's
// spec.podCIDRs, comma-separated (one per family on a dual-stack node).
// The engine cannot change a network's subnet, so the network is made
// again, which it can only be while no container is attached: with pods
// on another subnet the call fails with FailedPrecondition and changes
// nothing. kubelet calls again at its next node status sync, until it
// takes.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, r *runtime.UpdateRuntimeConfigRequest) (*runtime.UpdateRuntimeConfigResponse, error) {
	cidr := r.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	if cidr == "" {
		return &runtime.UpdateRuntimeConfigResponse{}, nil
	}
	want, err := ParseSubnets(cidr)
	if err != nil {
		return nil, grpcError(fmt.Errorf("%w: pod CIDR: %w", sandbox.ErrInvalid, err))
	}
	if err := s.setPodSubnets(ctx, want); err != nil {
		return nil, grpcError(err)
	}
	return &runtime.UpdateRuntimeConfigResponse{}, nil
}

func (s *Server) setPodSubnets(ctx context.Context, want []netip.Prefix) error {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	// prepare makes the network too: one in between the removal and the
	// making here (the events stream reconnecting, say) would make it on
	// the old subnets, and EnsureNetwork then keep those.
	if err := s.prepMu.lock(ctx); err != nil {
		return err
	}
	err := s.remakePodNetwork(ctx, want)
	s.prepMu.unlock()
	if errors.Is(err, errNetworkNotMade) {
		s.unprepare() // the next sandbox makes it
	}
	return err
}

// checkPodNetwork makes the pod network again when it was made with
// bridge options other than NetworkOptions (other flags before a restart,
// or another cri-compose) and no container is attached to it. With
// containers attached it keeps it, and the next sandbox checks again: the
// first one after the last pod is gone makes it anew before joining it.
// Without wait it gives up rather than wait for a sandbox being made (the
// event loop calls it, and a handler must not wait on that loop).
func (s *Server) checkPodNetwork(ctx context.Context, wait bool) {
	if wait {
		s.netMu.Lock()
	} else if !s.netMu.TryLock() {
		return // netRecheck stays set: the next sandbox checks
	}
	defer s.netMu.Unlock()
	if err := s.prepMu.lock(ctx); err != nil {
		return
	}
	err := s.remakePodNetwork(ctx, nil)
	s.prepMu.unlock()
	if errors.Is(err, errNetworkNotMade) {
		s.unprepare()
	}
	if err != nil {
		klog.ErrorS(err, "Cannot check the pod network's options", "network", s.cfg.Network)
	}
}

var errNetworkNotMade = errors.New("pod network not made")

// remakePodNetwork is setPodSubnets (want: the subnets) and
// checkPodNetwork (want nil: the network's own subnets) under both locks.
// The engine changes neither a network's subnets nor its options, so a
// network that differs is removed and made again, which it can be only
// while no container is attached. Then a change of subnets is refused
// (FailedPrecondition); a change of options alone is not: pods run as
// well on the network as it is, so it is kept, logged, and tried again at
// the next sandbox.
func (s *Server) remakePodNetwork(ctx context.Context, want []netip.Prefix) error {
	have, attached, err := s.docker.NetworkInspect(ctx, s.cfg.Network)
	setSubnets := want != nil
	if !setSubnets {
		want = have.Subnets
		if dockerapi.IsNotFound(err) {
			want = s.podSubnets()
		}
	}
	var changes []string
	if err == nil {
		changes = s.cfg.NetworkOptions.Diff(have.Bridge)
	}
	switch {
	case dockerapi.IsNotFound(err): // made below
	case err != nil:
		s.netRecheck.Store(true)
		return fmt.Errorf("pod network %s: %w", s.cfg.Network, err)
	case sameSubnets(have.Subnets, want) && len(changes) == 0:
		if setSubnets {
			s.notePodSubnets(want)
		}
		s.notePending("")
		return nil
	case attached > 0 && !sameSubnets(have.Subnets, want):
		return fmt.Errorf("%w: pod network %s has subnets %s and %d containers attached: the pod CIDR %s applies once they are gone",
			errPrecondition, s.cfg.Network, joinPrefixes(have.Subnets), attached, joinPrefixes(want))
	case attached > 0:
		if setSubnets {
			s.notePodSubnets(want)
		}
		pending := strings.Join(changes, ", ")
		var v klog.Level // said once, then again at every check with -v=2
		if s.podNetworkPending() == pending {
			v = 2
		}
		s.notePending(pending)
		klog.V(v).InfoS("Pod network kept with other options than cri-compose's, as containers are attached: they apply once these are gone (the next pod sandbox then makes the network again)",
			"network", s.cfg.Network, "differs", pending, "attached", attached)
		return nil
	default:
		if err := s.docker.NetworkRemove(ctx, s.cfg.Network); err != nil && !dockerapi.IsNotFound(err) {
			s.netRecheck.Store(true)
			return fmt.Errorf("pod network %s on subnets %s: %w", s.cfg.Network, joinPrefixes(have.Subnets), err)
		}
	}
	s.notePodSubnets(want)
	if _, err := s.docker.EnsureNetwork(ctx, s.cfg.Network, s.podNetworkSpec(want)); err != nil {
		s.netRecheck.Store(true)
		return fmt.Errorf("%w: %s on subnets %s: %w", errNetworkNotMade, s.cfg.Network, joinPrefixes(want), err)
	}
	s.notePending("")
	switch {
	case setSubnets:
		klog.InfoS("Pod network on the node's pod CIDR", "network", s.cfg.Network, "podCIDR", joinPrefixes(want), "was", joinPrefixes(have.Subnets),
			"options", strings.Join(changes, ", "))
	case len(changes) > 0:
		klog.InfoS("Pod network made again with cri-compose's options", "network", s.cfg.Network, "was", strings.Join(changes, ", "))
	}
	return nil
}

// podNetworkSpec is the pod network as it is made, on subnets.
func (s *Server) podNetworkSpec(subnets []netip.Prefix) dockerapi.NetworkSpec {
	return dockerapi.NetworkSpec{Subnets: subnets, Bridge: s.cfg.NetworkOptions,
		Labels: map[string]string{"io.cri-compose.network": "pods"}}
}

// notePending records how the pod network differs from NetworkOptions
// ("": not at all), for Status, and whether the next sandbox checks again.
func (s *Server) notePending(changes string) {
	s.hostMu.Lock()
	s.netPending = changes
	s.hostMu.Unlock()
	s.netRecheck.Store(changes != "")
}

func (s *Server) podNetworkPending() string {
	s.hostMu.RLock()
	defer s.hostMu.RUnlock()
	return s.netPending
}

// podSubnets are what the pod network is made with.
func (s *Server) podSubnets() []netip.Prefix {
	s.hostMu.RLock()
	defer s.hostMu.RUnlock()
	return s.subnets
}

func (s *Server) notePodSubnets(p []netip.Prefix) {
	s.hostMu.Lock()
	s.subnets = p
	s.hostMu.Unlock()
}

// ParseSubnets parses a comma-separated list of subnets, as in a node's
// pod CIDR or --network-subnet: at most one per address family.
func ParseSubnets(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(list, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, func(q netip.Prefix) bool { return q.Addr().Is4() == p.Addr().Is4() }) {
			return nil, fmt.Errorf("%s: more than one subnet of its address family in %q", p, list)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func sameSubnets(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		if !slices.Contains(b, p) {
			return false
		}
	}
	return true
}

func joinPrefixes(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "(the engine's choice)"
	}
	return strings.Join(prefixStrings(ps), ",")
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
