package dockerapi

import (
	"context"
	"io"
	"time"

	"github.com/moby/moby/client"
)

// VolumeCreate makes a named local volume (no error if it exists: the
// engine answers with the existing one).
func (c *Client) VolumeCreate(ctx context.Context, name string, labels map[string]string) (err error) {
	defer c.observe("create volume", time.Now(), &err)
	_, err = c.api.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Labels: labels})
	return wrap("create volume", name, err)
}

// VolumeRemove removes a named volume.
func (c *Client) VolumeRemove(ctx context.Context, name string) (err error) {
	defer c.observe("remove volume", time.Now(), &err)
	_, err = c.api.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true})
	return wrap("remove volume", name, err)
}

// VolumeList lists the volumes with all of labels ("k=v"): their labels
// by name.
func (c *Client) VolumeList(ctx context.Context, labels ...string) (_ map[string]map[string]string, err error) {
	defer c.observe("list volumes", time.Now(), &err)
	f := client.Filters{}
	if len(labels) > 0 {
		f.Add("label", labels...)
	}
	r, err := c.api.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, wrap("list volumes", "", err)
	}
	out := map[string]map[string]string{}
	for _, v := range r.Items {
		out[v.Name] = v.Labels
	}
	return out, nil
}

// CopyToContainer extracts a tar archive at dir in a container's
// filesystem (its volumes included), as PUT /containers/{id}/archive.
func (c *Client) CopyToContainer(ctx context.Context, id, dir string, tar io.Reader) (err error) {
	defer c.observe("copy to container", time.Now(), &err)
	_, err = c.api.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: dir, Content: tar})
	return wrap("copy to container", id, err)
}
