package cri

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// Attach checks that the container runs and returns a single-use URL on the
// streaming server (streaming.go) where the client attaches to its stdio.
func (s *Server) Attach(ctx context.Context, r *runtime.AttachRequest) (*runtime.AttachResponse, error) {
	c, err := s.runningContainer(r.GetContainerId(), "attach to")
	if err != nil {
		return nil, grpcError(err)
	}
	lib, err := s.stream.server()
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(r)
	req.ContainerId = c.ID
	resp, err := lib.GetAttach(req)
	return resp, grpcError(err)
}

// Attach joins a client of the streaming server to the container's stdio
// from now on, until the container exits, the client closes its stdin
// (the engine then ends the attach) or goes away, or the server stops.
// Stdin is joined only when the container was created with stdin open; the
// output is demultiplexed unless the container has a TTY, whose size
// follows the client's.
func (r streamRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	defer closeWriters(out, errw)
	ctx, cancel := r.session(ctx)
	defer cancel()
	s := r.s
	c, err := s.runningContainer(containerID, "attach to")
	if err != nil {
		return err
	}
	if !c.ServiceCfg.StdinOpen {
		in = nil
	}
	st, err := s.docker.ContainerAttach(ctx, c.ID, dockerapi.AttachConfig{
		Stdin: in != nil, Stdout: out != nil, Stderr: errw != nil,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	if c.Tty && resize != nil {
		go resizeLoop(ctx, resize, func(ctx context.Context, h, w uint) error {
			return s.docker.ContainerResize(ctx, c.ID, h, w)
		})
	}
	// The container's TTY, not the request's, decides the stream's format.
	if err := pipeStreams(ctx, st, in, out, errw, c.Tty); err != nil {
		return fmt.Errorf("attach to container %s: %w", c.ID, err)
	}
	return nil
}
