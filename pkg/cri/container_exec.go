package cri

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Exec checks that the container runs and returns a single-use URL on the
// streaming server (streaming.go) where the client runs the command.
func (s *Server) Exec(ctx context.Context, r *runtime.ExecRequest) (*runtime.ExecResponse, error) {
	if len(r.GetCmd()) == 0 {
		return nil, grpcError(fmt.Errorf("%w: exec needs a command", sandbox.ErrInvalid))
	}
	c, err := s.runningContainer(r.GetContainerId(), "exec in")
	if err != nil {
		return nil, grpcError(err)
	}
	lib, err := s.stream.server()
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(r)
	req.ContainerId = c.ID // a prefix is resolved now, not when the URL is used
	resp, err := lib.GetExec(req)
	return resp, grpcError(err)
}

// runningContainer is the record of a running container, or NotFound or
// FailedPrecondition naming what the caller wanted to do (op).
func (s *Server) runningContainer(id, op string) (containerRec, error) {
	c, err := s.store.Container(id)
	if err != nil {
		return containerRec{}, err
	}
	if c.State != runtime.ContainerState_CONTAINER_RUNNING {
		return containerRec{}, fmt.Errorf("%s container %s: it is not running (%s): %w", op, c.ID, c.State, errPrecondition)
	}
	return c, nil
}

// Exec runs cmd in the container for a client of the streaming server, with
// the streams it asked for, and a terminal resized as the client's when
// tty. A non-zero exit is returned as a utilexec.ExitError, which the
// library reports to the client with the code. When the client goes away
// or the server stops, the process is killed.
func (r streamRuntime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errw io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	defer closeWriters(out, errw)
	ctx, cancel := r.session(ctx)
	defer cancel()
	s := r.s
	// The container may have stopped since the URL was handed out.
	c, err := s.runningContainer(containerID, "exec in")
	if err != nil {
		return err
	}
	execID, err := s.docker.ExecCreate(ctx, c.ID, dockerapi.ExecConfig{
		Cmd: cmd, Tty: tty, Stdin: in != nil, Stdout: out != nil, Stderr: errw != nil && !tty,
	})
	if err != nil {
		return err
	}
	st, err := s.docker.ExecAttach(ctx, execID, tty)
	if err != nil {
		return err
	}
	defer st.Close()
	if tty && resize != nil {
		go resizeLoop(ctx, resize, func(ctx context.Context, h, w uint) error {
			return s.docker.ExecResize(ctx, execID, h, w)
		})
	}
	if err := pipeStreams(ctx, st, in, out, errw, tty); err != nil {
		s.killExec(execID)
		return fmt.Errorf("exec in container %s: %w", c.ID, err)
	}
	code, err := s.execExitCode(ctx, execID)
	if err != nil {
		return err
	}
	if code != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: int(code)}
	}
	return nil
}
