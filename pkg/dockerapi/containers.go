package dockerapi

import (
	"context"
	"io"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// ContainerCreate creates a container named name and returns its id.
func (c *Client) ContainerCreate(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig) (_ string, err error) {
	defer c.observe("create container", time.Now(), &err)
	r, err := c.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name, Config: cfg, HostConfig: hc, NetworkingConfig: nc,
	})
	if err != nil {
		return "", wrap("create container", name, err)
	}
	return r.ID, nil
}

// ContainerStart starts a created container.
func (c *Client) ContainerStart(ctx context.Context, id string) (err error) {
	defer c.observe("start container", time.Now(), &err)
	_, err = c.api.ContainerStart(ctx, id, client.ContainerStartOptions{})
	return wrap("start container", id, err)
}

// ContainerStop sends the container's stop signal, waits up to timeout and
// then kills it (the engine does both). A negative timeout waits forever.
func (c *Client) ContainerStop(ctx context.Context, id string, timeout time.Duration) (err error) {
	defer c.observe("stop container", time.Now(), &err)
	secs := int(timeout / time.Second)
	if timeout > 0 && timeout%time.Second != 0 {
		secs++ // round up: never kill earlier than asked
	}
	if timeout < 0 {
		secs = -1
	}
	_, err = c.api.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &secs})
	return wrap("stop container", id, err)
}

// ContainerKill sends signal ("" means SIGKILL).
func (c *Client) ContainerKill(ctx context.Context, id, signal string) (err error) {
	defer c.observe("kill container", time.Now(), &err)
	_, err = c.api.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: signal})
	return wrap("kill container", id, err)
}

// ContainerRemove force-removes a container and its anonymous volumes.
func (c *Client) ContainerRemove(ctx context.Context, id string) (err error) {
	defer c.observe("remove container", time.Now(), &err)
	_, err = c.api.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	return wrap("remove container", id, err)
}

// ContainerInspect returns the engine's full view of one container.
func (c *Client) ContainerInspect(ctx context.Context, id string) (_ container.InspectResponse, err error) {
	defer c.observe("inspect container", time.Now(), &err)
	r, err := c.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return container.InspectResponse{}, wrap("inspect container", id, err)
	}
	return r.Container, nil
}

// ContainerList lists all containers (running or not) carrying every label
// in labels ("key" or "key=value").
func (c *Client) ContainerList(ctx context.Context, labels ...string) (_ []container.Summary, err error) {
	defer c.observe("list containers", time.Now(), &err)
	f := client.Filters{}
	if len(labels) > 0 {
		f.Add("label", labels...)
	}
	r, err := c.api.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, wrap("list containers", "", err)
	}
	return r.Items, nil
}

// ContainerUpdate changes a container's resources.
func (c *Client) ContainerUpdate(ctx context.Context, id string, res *container.Resources) (err error) {
	defer c.observe("update container", time.Now(), &err)
	_, err = c.api.ContainerUpdate(ctx, id, client.ContainerUpdateOptions{Resources: res})
	return wrap("update container", id, err)
}

// ContainerLogs follows a container's stdout and stderr with timestamps from
// since on. The stream is multiplexed unless the container has a TTY.
func (c *Client) ContainerLogs(ctx context.Context, id string, since time.Time, follow bool) (io.ReadCloser, error) {
	return c.containerLogs(ctx, id, since, follow, "")
}

// ContainerLogTail is the last tail messages of a container's log (of both
// streams together) that are stamped since or later, with timestamps, not
// followed. The engine finds them from the end of its log, where a fetch
// by time alone reads the log from its start.
func (c *Client) ContainerLogTail(ctx context.Context, id string, since time.Time, tail int) (io.ReadCloser, error) {
	return c.containerLogs(ctx, id, since, false, strconv.Itoa(tail))
}

func (c *Client) containerLogs(ctx context.Context, id string, since time.Time, follow bool, tail string) (_ io.ReadCloser, err error) {
	defer c.observe("container logs", time.Now(), &err)
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Follow: follow, Tail: tail}
	if !since.IsZero() {
		opts.Since = strconv.FormatInt(since.Unix(), 10) + "." + leftPad9(since.Nanosecond())
	}
	r, err := c.api.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, wrap("container logs", id, err)
	}
	return r, nil
}

func leftPad9(n int) string {
	s := strconv.Itoa(n)
	for len(s) < 9 {
		s = "0" + s
	}
	return s
}

// CopyFromContainer returns a tar stream of path inside the container (which
// may be stopped).
func (c *Client) CopyFromContainer(ctx context.Context, id, path string) (_ io.ReadCloser, err error) {
	defer c.observe("copy from container", time.Now(), &err)
	r, err := c.api.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
	if err != nil {
		return nil, wrap("copy from container", id+":"+path, err)
	}
	return r.Content, nil
}

// ContainerExport returns a tar stream of the container's whole filesystem
// (its image's layers and its writable layer, never its mounts); the
// container need not run.
func (c *Client) ContainerExport(ctx context.Context, id string) (_ io.ReadCloser, err error) {
	defer c.observe("export container", time.Now(), &err)
	r, err := c.api.ContainerExport(ctx, id, client.ContainerExportOptions{})
	if err != nil {
		return nil, wrap("export container", id, err)
	}
	return r, nil
}
