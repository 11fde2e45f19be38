package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/dockerapi/dockertest"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// TestGRPCCodes: every error a handler can meet, wrapped as the handlers
// wrap them, reaches the client with the code kubelet acts on, and the
// message keeps the whole chain. No engine needed.
func TestGRPCCodes(t *testing.T) {
	engine := func(kind error) error {
		return fmt.Errorf("create pod sandbox p: %w", &dockerapi.Error{Kind: dockerapi.KindOf(kind), Op: "create container", Ref: "p", Err: kind})
	}
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("pod sandbox x: %w", errNotFound), codes.NotFound},
		{fmt.Errorf("attempt 0 exists already: %w", errAlreadyExists), codes.AlreadyExists},
		{fmt.Errorf("reopen log: it is not running: %w", errPrecondition), codes.FailedPrecondition},
		{fmt.Errorf("still reading pods: %w", errUnavailable), codes.Unavailable},
		{fmt.Errorf("%w: runtime handler %q", sandbox.ErrInvalid, "kata"), codes.InvalidArgument},
		{fmt.Errorf("%w: checkpoint", sandbox.ErrUnsupported), codes.Unimplemented},
		{fmt.Errorf("inspect: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{fmt.Errorf("inspect: %w", context.Canceled), codes.Canceled},
		{fmt.Errorf("write compose file: %w", &fs.PathError{Op: "write", Path: "compose.yaml", Err: syscall.ENOSPC}), codes.ResourceExhausted},
		{fmt.Errorf("write resolv.conf: %w", syscall.EDQUOT), codes.ResourceExhausted},
		{engine(dockertest.ErrNotFound), codes.NotFound},
		{engine(dockertest.ErrConflict), codes.AlreadyExists},
		{engine(dockertest.ErrUnavailable), codes.Unavailable},
		{&dockerapi.Error{Kind: dockerapi.KindInvalid, Op: "create container", Err: errors.New("bad mount")}, codes.InvalidArgument},
		{&dockerapi.Error{Kind: dockerapi.KindForbidden, Op: "pull image", Err: errors.New("denied")}, codes.PermissionDenied},
		{&dockerapi.Error{Kind: dockerapi.KindCanceled, Op: "pull image", Err: errors.New("stopped")}, codes.Canceled},
		{errors.New("something else"), codes.Unknown},
	} {
		got := grpcError(tc.err)
		st, _ := status.FromError(got)
		if st.Code() != tc.want || st.Message() != tc.err.Error() {
			t.Errorf("%q: %v %q, want %v with the whole message", tc.err, st.Code(), st.Message(), tc.want)
		}
		// A status passes through unchanged (a handler's own, or one wrapped twice).
		if again := grpcError(got); again != got {
			t.Errorf("%q: a status mapped again became %v", tc.err, again)
		}
	}
	if grpcError(nil) != nil {
		t.Error("grpcError(nil) is not nil")
	}
}
