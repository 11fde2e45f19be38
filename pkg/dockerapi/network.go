package dockerapi

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// The bridge driver's options that BridgeOptions sets.
const (
	OptionIPMasquerade = "com.docker.network.bridge.enable_ip_masquerade"
	OptionMTU          = "com.docker.network.driver.mtu"
)

// NetworkSpec is what a bridge network is made with, and what inspecting
// one tells of it.
type NetworkSpec struct {
	// Subnets, at most one per address family; none lets the engine pick.
	// An IPv6 subnet makes the network dual-stack or IPv6-only.
	Subnets []netip.Prefix
	Bridge  BridgeOptions
	Labels  map[string]string
}

// BridgeOptions are the bridge driver's options cri-compose sets. The zero
// value is the engine's defaults, and a network made by an older
// cri-compose, without options, reads back as it.
type BridgeOptions struct {
	// NoIPMasquerade keeps the source address of what containers send off
	// the host: a cluster network that masquerades only what leaves the
	// cluster (flanneld --ip-masq) needs pod-to-pod traffic between hosts
	// to keep the pod's address.
	NoIPMasquerade bool
	// MTU of the bridge and the containers' interfaces; 0 is the engine's
	// default (dockerd's --mtu). An overlay needs room for its header:
	// 1450 for VXLAN on a 1500-byte link.
	MTU int
}

// driverOptions are the options to create a network with: only those that
// differ from the engine's defaults.
func (o BridgeOptions) driverOptions() map[string]string {
	m := map[string]string{}
	if o.NoIPMasquerade {
		m[OptionIPMasquerade] = "false"
	}
	if o.MTU > 0 {
		m[OptionMTU] = strconv.Itoa(o.MTU)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// ParseBridgeOptions reads the options of an inspected network: a missing
// option is the engine's default (masquerading on, its own MTU).
func ParseBridgeOptions(opts map[string]string) BridgeOptions {
	var o BridgeOptions
	if v, ok := opts[OptionIPMasquerade]; ok {
		if on, err := strconv.ParseBool(v); err == nil {
			o.NoIPMasquerade = !on
		}
	}
	if v, err := strconv.Atoi(opts[OptionMTU]); err == nil && v > 0 {
		o.MTU = v
	}
	return o
}

// Diff says how have (a network's options) differs from o, one phrase per
// option, as "ip masquerade off (wanted on)"; nil when they are the same.
func (o BridgeOptions) Diff(have BridgeOptions) []string {
	var out []string
	if have.NoIPMasquerade != o.NoIPMasquerade {
		out = append(out, fmt.Sprintf("ip masquerade %s (wanted %s)", onOff(!have.NoIPMasquerade), onOff(!o.NoIPMasquerade)))
	}
	if have.MTU != o.MTU {
		out = append(out, fmt.Sprintf("mtu %s (wanted %s)", mtuString(have.MTU), mtuString(o.MTU)))
	}
	return out
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func mtuString(mtu int) string {
	if mtu == 0 {
		return "the engine's default"
	}
	return strconv.Itoa(mtu)
}

// EnsureNetwork returns the id of the bridge network name, creating it as
// spec says if it does not exist yet. An existing network is kept as it
// is: NetworkInspect tells how it differs.
func (c *Client) EnsureNetwork(ctx context.Context, name string, spec NetworkSpec) (_ string, err error) {
	defer c.observe("ensure network", time.Now(), &err)
	c.netMu.Lock()
	defer c.netMu.Unlock()
	r, err := c.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err == nil {
		return r.Network.ID, nil
	}
	if !IsNotFound(wrap("", "", err)) {
		// "ambiguous": two networks of that name (see below).
		if id, ok := c.oldestNetwork(ctx, name); ok {
			return id, nil
		}
		return "", wrap("inspect network", name, err)
	}
	opts := client.NetworkCreateOptions{Driver: "bridge", Labels: spec.Labels, Options: spec.Bridge.driverOptions()}
	if len(spec.Subnets) > 0 {
		opts.IPAM = &network.IPAM{Driver: "default"}
		v6 := false
		for _, p := range spec.Subnets {
			opts.IPAM.Config = append(opts.IPAM.Config, network.IPAMConfig{Subnet: p})
			v6 = v6 || p.Addr().Is6()
		}
		opts.EnableIPv6 = &v6
	}
	cr, err := c.api.NetworkCreate(ctx, name, opts)
	if err != nil {
		if IsConflict(wrap("", "", err)) { // created concurrently
			r, ierr := c.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
			if ierr == nil {
				return r.Network.ID, nil
			}
		}
		return "", wrap("create network", name, err)
	}
	// Engines before API 1.44 check names only when asked (CheckDuplicate,
	// which this client cannot send), so two processes ensuring the network
	// at once can both create one, and the name then resolves to neither
	// ("ambiguous"). Converge: the oldest wins, the others are removed.
	if id, ok := c.oldestNetwork(ctx, name); ok {
		return id, nil
	}
	return cr.ID, nil
}

// oldestNetwork returns the oldest network named exactly name and tries to
// remove any younger one of that name (the engine refuses while one is in
// use).
func (c *Client) oldestNetwork(ctx context.Context, name string) (string, bool) {
	r, err := c.api.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
	if err != nil {
		return "", false
	}
	var same []network.Summary
	for _, n := range r.Items {
		if n.Name == name {
			same = append(same, n)
		}
	}
	if len(same) == 0 {
		return "", false
	}
	sort.Slice(same, func(i, j int) bool {
		if !same[i].Created.Equal(same[j].Created) {
			return same[i].Created.Before(same[j].Created)
		}
		return same[i].ID < same[j].ID
	})
	for _, n := range same[1:] {
		_, _ = c.api.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
	}
	return same[0].ID, true
}

// NetworkInspect returns what network name was made with (its labels
// too) and how many containers are attached to it. A missing network is a
// NotFound error.
func (c *Client) NetworkInspect(ctx context.Context, name string) (spec NetworkSpec, attached int, err error) {
	defer c.observe("inspect network", time.Now(), &err)
	r, err := c.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		return NetworkSpec{}, 0, wrap("inspect network", name, err)
	}
	for _, cfg := range r.Network.IPAM.Config {
		if cfg.Subnet.IsValid() {
			spec.Subnets = append(spec.Subnets, cfg.Subnet.Masked())
		}
	}
	spec.Bridge = ParseBridgeOptions(r.Network.Options)
	spec.Labels = r.Network.Labels
	return spec, len(r.Network.Containers), nil
}

// NetworkSubnets is NetworkInspect for callers that need only the
// subnets.
func (c *Client) NetworkSubnets(ctx context.Context, name string) ([]netip.Prefix, int, error) {
	spec, attached, err := c.NetworkInspect(ctx, name)
	return spec.Subnets, attached, err
}

// NetworkRemove removes a network.
func (c *Client) NetworkRemove(ctx context.Context, name string) (err error) {
	defer c.observe("remove network", time.Now(), &err)
	_, err = c.api.NetworkRemove(ctx, name, client.NetworkRemoveOptions{})
	return wrap("remove network", name, err)
}
