package dockerapi

import (
	"context"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
)

// PullProgress is one report of a pull under way: the status of a layer
// (Layer is its short id) or of the whole image (Layer ""), with the bytes
// done and in all while it downloads or extracts.
type PullProgress struct {
	Layer, Status  string
	Current, Total int64
}

// ImagePull pulls ref (a normalized reference) with optional credentials and
// waits until the engine has it. progress, if set, is told of every report
// the engine sends on the way.
func (c *Client) ImagePull(ctx context.Context, ref string, auth *registry.AuthConfig, progress func(PullProgress)) (err error) {
	defer c.observe("pull image", time.Now(), &err)
	var opts client.ImagePullOptions
	if auth != nil {
		enc, err := authconfig.Encode(*auth)
		if err != nil {
			return &Error{Kind: KindInvalid, Op: "pull image", Ref: ref, Err: err}
		}
		opts.RegistryAuth = enc
	}
	r, err := c.api.ImagePull(ctx, ref, opts)
	if err != nil {
		return wrap("pull image", ref, err)
	}
	defer r.Close()
	// Errors of the pull itself (unknown manifest, auth) arrive in the stream.
	for m, err := range r.JSONMessages(ctx) {
		if err != nil {
			return wrap("pull image", ref, err)
		}
		if m.Error != nil {
			return wrap("pull image", ref, streamError(m.Error))
		}
		if progress != nil {
			p := PullProgress{Layer: m.ID, Status: m.Status}
			if m.Progress != nil {
				p.Current, p.Total = m.Progress.Current, m.Progress.Total
			}
			progress(p)
		}
	}
	return nil
}

// ImageInspect returns the engine's view of an image by name, id or digest.
func (c *Client) ImageInspect(ctx context.Context, ref string) (_ image.InspectResponse, err error) {
	defer c.observe("inspect image", time.Now(), &err)
	r, err := c.api.ImageInspect(ctx, ref)
	if err != nil {
		return image.InspectResponse{}, wrap("inspect image", ref, err)
	}
	return r.InspectResponse, nil
}

// ImageList lists the engine's images; reference filters by name pattern
// when not empty.
func (c *Client) ImageList(ctx context.Context, reference string) (_ []image.Summary, err error) {
	defer c.observe("list images", time.Now(), &err)
	f := client.Filters{}
	if reference != "" {
		f.Add("reference", reference)
	}
	r, err := c.api.ImageList(ctx, client.ImageListOptions{Filters: f})
	if err != nil {
		return nil, wrap("list images", reference, err)
	}
	return r.Items, nil
}

// ImageRemove removes an image name (untagging it when other names remain) or
// an image id with all its names.
func (c *Client) ImageRemove(ctx context.Context, ref string, force bool) (err error) {
	defer c.observe("remove image", time.Now(), &err)
	_, err = c.api.ImageRemove(ctx, ref, client.ImageRemoveOptions{Force: force, PruneChildren: true})
	return wrap("remove image", ref, err)
}

// ImageTag gives image src the additional name target.
func (c *Client) ImageTag(ctx context.Context, src, target string) (err error) {
	defer c.observe("tag image", time.Now(), &err)
	_, err = c.api.ImageTag(ctx, client.ImageTagOptions{Source: src, Target: target})
	return wrap("tag image", src+" as "+target, err)
}

// ImageLoad loads a `docker save` archive into the engine.
func (c *Client) ImageLoad(ctx context.Context, archive io.Reader) (err error) {
	defer c.observe("load image", time.Now(), &err)
	r, err := c.api.ImageLoad(ctx, archive, client.ImageLoadWithQuiet(true))
	if err != nil {
		return wrap("load image", "", err)
	}
	defer r.Close()
	// The engine reports load errors inside the JSON stream.
	return wrap("load image", "", readJSONStream(r))
}
