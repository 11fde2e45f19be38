package dockerapi

import (
	"bufio"
	"context"
	"net"
	"time"

	"github.com/moby/moby/client"
)

// ExecConfig describes a process to run in a running container.
type ExecConfig struct {
	Cmd                   []string
	Tty                   bool
	Stdin, Stdout, Stderr bool
}

// Stream is a hijacked engine connection: Reader carries the output
// (multiplexed unless Tty), Conn takes the input.
type Stream struct {
	Conn   net.Conn
	Reader *bufio.Reader
}

// Close ends the stream.
func (s *Stream) Close() error { return s.Conn.Close() }

// ExecState is the state of an exec'd process.
type ExecState struct {
	Running  bool
	ExitCode int
	Pid      int // on the engine's host
}

// ExecCreate prepares a process in container id and returns the exec id.
func (c *Client) ExecCreate(ctx context.Context, id string, cfg ExecConfig) (_ string, err error) {
	defer c.observe("create exec in", time.Now(), &err)
	r, err := c.api.ExecCreate(ctx, id, client.ExecCreateOptions{
		Cmd: cfg.Cmd, TTY: cfg.Tty, AttachStdin: cfg.Stdin, AttachStdout: cfg.Stdout, AttachStderr: cfg.Stderr,
	})
	if err != nil {
		return "", wrap("create exec in", id, err)
	}
	return r.ID, nil
}

// ExecAttach starts an exec'd process and returns its streams.
func (c *Client) ExecAttach(ctx context.Context, execID string, tty bool) (_ *Stream, err error) {
	defer c.observe("start exec", time.Now(), &err)
	r, err := c.api.ExecAttach(ctx, execID, client.ExecAttachOptions{TTY: tty})
	if err != nil {
		return nil, wrap("start exec", execID, err)
	}
	return &Stream{Conn: r.Conn, Reader: r.Reader}, nil
}

// ExecInspect reports an exec'd process's state.
func (c *Client) ExecInspect(ctx context.Context, execID string) (_ ExecState, err error) {
	defer c.observe("inspect exec", time.Now(), &err)
	r, err := c.api.ExecInspect(ctx, execID, client.ExecInspectOptions{})
	if err != nil {
		return ExecState{}, wrap("inspect exec", execID, err)
	}
	return ExecState{Running: r.Running, ExitCode: r.ExitCode, Pid: r.PID}, nil
}

// ExecResize changes an exec'd process's terminal size.
func (c *Client) ExecResize(ctx context.Context, execID string, height, width uint) (err error) {
	defer c.observe("resize exec", time.Now(), &err)
	_, err = c.api.ExecResize(ctx, execID, client.ExecResizeOptions{Height: height, Width: width})
	return wrap("resize exec", execID, err)
}
