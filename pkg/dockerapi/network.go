package dockerapi

import (
	"context"
	"net/netip"
	"sort"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// EnsureNetwork returns the id of the bridge network name, creating it (with
// subnets, at most one per address family, and labels) if it does not
// exist yet. An IPv6 subnet makes the network dual-stack or IPv6-only.
func (c *Client) EnsureNetwork(ctx context.Context, name string, subnets []netip.Prefix, labels map[string]string) (_ string, err error) {
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
	opts := client.NetworkCreateOptions{Driver: "bridge", Labels: labels}
	if len(subnets) > 0 {
		opts.IPAM = &network.IPAM{Driver: "default"}
		v6 := false
		for _, p := range subnets {
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

// NetworkSubnets returns the subnets of network name and how many
// containers are attached to it. A missing network is a NotFound error.
func (c *Client) NetworkSubnets(ctx context.Context, name string) (subnets []netip.Prefix, attached int, err error) {
	defer c.observe("inspect network", time.Now(), &err)
	r, err := c.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		return nil, 0, wrap("inspect network", name, err)
	}
	for _, cfg := range r.Network.IPAM.Config {
		if cfg.Subnet.IsValid() {
			subnets = append(subnets, cfg.Subnet.Masked())
		}
	}
	return subnets, len(r.Network.Containers), nil
}

// NetworkRemove removes a network.
func (c *Client) NetworkRemove(ctx context.Context, name string) (err error) {
	defer c.observe("remove network", time.Now(), &err)
	_, err = c.api.NetworkRemove(ctx, name, client.NetworkRemoveOptions{})
	return wrap("remove network", name, err)
}
