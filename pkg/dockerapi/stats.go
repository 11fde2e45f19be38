package dockerapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// StatsSample is one resource usage sample of a container, as the engine
// reports it (cgroup v1 or v2 figures, networks of its namespace).
type StatsSample = container.StatsResponse

// ContainerStatsStream follows the engine's stats stream of a running
// container (one sample about every second, the engine's collection tick)
// and hands every sample to fn until ctx ends, the container stops or the
// stream breaks. It returns nil when the engine ends the stream.
func (c *Client) ContainerStatsStream(ctx context.Context, id string, fn func(StatsSample)) error {
	start := time.Now()
	r, err := c.api.ContainerStats(ctx, id, client.ContainerStatsOptions{Stream: true})
	if err != nil {
		err = wrap("container stats", id, err)
	}
	c.observe("container stats", start, &err) // until the stream is open
	if err != nil {
		return err
	}
	defer r.Body.Close()
	dec := json.NewDecoder(r.Body)
	for {
		var s StatsSample
		if err := dec.Decode(&s); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if ctx.Err() != nil {
				return wrap("container stats", id, ctx.Err())
			}
			return wrap("container stats", id, err)
		}
		fn(s)
	}
}

// ContainerSize is the size of one container's writable layer, which the
// engine walks for this call alone.
func (c *Client) ContainerSize(ctx context.Context, id string) (_ int64, err error) {
	defer c.observe("inspect container size", time.Now(), &err)
	r, err := c.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{Size: true})
	if err != nil {
		return 0, wrap("inspect container size", id, err)
	}
	if r.Container.SizeRw == nil {
		return 0, &Error{Kind: KindUnknown, Op: "inspect container size", Ref: id, Err: errors.New("the engine reported no size")}
	}
	return *r.Container.SizeRw, nil
}

// ContainerSizes returns the size of the writable layer (SizeRw) of every
// container carrying all labels, in one engine call. The engine walks each
// container's layer for it: call it seldom.
func (c *Client) ContainerSizes(ctx context.Context, labels ...string) (_ map[string]int64, err error) {
	defer c.observe("list container sizes", time.Now(), &err)
	f := client.Filters{}
	if len(labels) > 0 {
		f.Add("label", labels...)
	}
	r, err := c.api.ContainerList(ctx, client.ContainerListOptions{All: true, Size: true, Filters: f})
	if err != nil {
		return nil, wrap("list container sizes", "", err)
	}
	out := make(map[string]int64, len(r.Items))
	for _, s := range r.Items {
		out[s.ID] = s.SizeRw
	}
	return out, nil
}
