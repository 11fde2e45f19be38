package cri

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// MaxExecSyncOutput caps what ExecSync keeps of each of stdout and stderr
// (as containerd does); the rest is read and dropped so the process never
// blocks on a full pipe.
const MaxExecSyncOutput = 16 << 20

// ExecSync runs a command in a running container and returns its output and
// exit code. With a timeout, a process still running then is killed and the
// call fails with DeadlineExceeded.
func (s *Server) ExecSync(ctx context.Context, r *runtime.ExecSyncRequest) (*runtime.ExecSyncResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	if len(r.GetCmd()) == 0 {
		return nil, grpcError(fmt.Errorf("%w: exec needs a command", sandbox.ErrInvalid))
	}
	if c.State != runtime.ContainerState_CONTAINER_RUNNING {
		return nil, grpcError(fmt.Errorf("exec in container %s: it is not running: %w", c.ID, errPrecondition))
	}
	execID, err := s.docker.ExecCreate(ctx, c.ID, dockerapi.ExecConfig{Cmd: r.GetCmd(), Stdout: true, Stderr: true})
	if err != nil {
		return nil, grpcError(err)
	}
	// The stream lives on its own context: only the deadline below, the
	// caller going away, or the process ending stops it.
	st, err := s.docker.ExecAttach(context.WithoutCancel(ctx), execID, false)
	if err != nil {
		return nil, grpcError(err)
	}
	defer st.Close()
	var stdout, stderr cappedBuffer
	// A stream that breaks ends the output there; the exit code still
	// comes from the engine.
	done := make(chan struct{})
	go func() {
		_, _ = stdcopy.StdCopy(&stdout, &stderr, st.Reader)
		close(done)
	}()
	var deadline <-chan time.Time
	if t := r.GetTimeout(); t > 0 {
		timer := time.NewTimer(time.Duration(t) * time.Second)
		defer timer.Stop()
		deadline = timer.C
	}
	select {
	case <-done:
	case <-deadline:
		s.killExec(execID)
		return nil, status.Errorf(codes.DeadlineExceeded, "exec in container %s: timeout %ds exceeded; the process was killed", c.ID, r.GetTimeout())
	case <-ctx.Done():
		s.killExec(execID)
		return nil, grpcError(ctx.Err())
	}
	code, err := s.execExitCode(ctx, execID)
	if err != nil {
		return nil, grpcError(err)
	}
	return &runtime.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: code}, nil
}

// execExitCode waits (briefly: the output has ended) for the engine to see
// the process gone, and returns its exit code.
func (s *Server) execExitCode(ctx context.Context, execID string) (int32, error) {
	for i := 0; ; i++ {
		st, err := s.docker.ExecInspect(ctx, execID)
		if err != nil {
			return 0, err
		}
		if !st.Running {
			return int32(st.ExitCode), nil
		}
		if i > 200 {
			return 0, fmt.Errorf("exec %s: output ended but the process still runs", execID)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// killExec kills an exec'd process and its descendants. The engine has no
// call for it, so this works where the engine is local (its pids are ours).
func (s *Server) killExec(execID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.docker.ExecInspect(ctx, execID)
	if err != nil || !st.Running || st.Pid <= 0 {
		return
	}
	if !s.docker.IsLocal() {
		klog.InfoS("Cannot kill a timed-out exec on a remote engine", "exec", execID)
		return
	}
	for _, pid := range append(descendants(st.Pid), st.Pid) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			klog.V(2).InfoS("Kill of a timed-out exec process failed", "pid", pid, "err", err)
		}
	}
}

// descendants lists the children of pid, recursively, from /proc.
func descendants(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if child, err := strconv.Atoi(f); err == nil {
				out = append(out, descendants(child)...)
				out = append(out, child)
			}
		}
	}
	return out
}

// cappedBuffer keeps the first MaxExecSyncOutput bytes written to it.
type cappedBuffer struct{ bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := MaxExecSyncOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
