package dockerapi

import (
	"context"
	"net/netip"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// EnsureNetwork returns the id of the bridge network name, creating it (with
// subnet when valid, and labels) if it does not exist yet.
func (c *Client) EnsureNetwork(ctx context.Context, name string, subnet netip.Prefix, labels map[string]string) (string, error) {
	r, err := c.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err == nil {
		return r.Network.ID, nil
	}
	if !IsNotFound(wrap("", "", err)) {
		return "", wrap("inspect network", name, err)
	}
	opts := client.NetworkCreateOptions{Driver: "bridge", Labels: labels}
	if subnet.IsValid() {
		opts.IPAM = &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{Subnet: subnet}}}
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
	return cr.ID, nil
}

// NetworkRemove removes a network.
func (c *Client) NetworkRemove(ctx context.Context, name string) error {
	_, err := c.api.NetworkRemove(ctx, name, client.NetworkRemoveOptions{})
	return wrap("remove network", name, err)
}
