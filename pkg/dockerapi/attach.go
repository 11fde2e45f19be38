package dockerapi

import (
	"context"
	"time"

	"github.com/moby/moby/client"
)

// AttachConfig says which of a running container's streams to attach to.
type AttachConfig struct {
	Stdin, Stdout, Stderr bool
}

// ContainerAttach attaches to the stdio of container id from now on (no
// earlier output). Reader carries the output, multiplexed unless the
// container has a TTY; Conn takes the input when Stdin is set.
func (c *Client) ContainerAttach(ctx context.Context, id string, cfg AttachConfig) (_ *Stream, err error) {
	defer c.observe("attach to", time.Now(), &err)
	r, err := c.api.ContainerAttach(ctx, id, client.ContainerAttachOptions{
		Stream: true, Stdin: cfg.Stdin, Stdout: cfg.Stdout, Stderr: cfg.Stderr,
	})
	if err != nil {
		return nil, wrap("attach to", id, err)
	}
	return &Stream{Conn: r.Conn, Reader: r.Reader}, nil
}

// ContainerResize changes the size of a container's TTY.
func (c *Client) ContainerResize(ctx context.Context, id string, height, width uint) (err error) {
	defer c.observe("resize tty of", time.Now(), &err)
	_, err = c.api.ContainerResize(ctx, id, client.ContainerResizeOptions{Height: height, Width: width})
	return wrap("resize tty of", id, err)
}

// CloseWrite half-closes the stream's input, so the process reads EOF while
// its output still flows. A connection that cannot be half-closed is left
// as it is (as the docker CLI does).
func (s *Stream) CloseWrite() error {
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
