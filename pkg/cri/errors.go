package cri

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cri-compose/cri-compose/pkg/cri/store"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// errNotFound and friends mark errors raised by the handlers themselves;
// the store's lookups raise the same not-found and unavailable ones.
var (
	errNotFound      = store.ErrNotFound
	errAlreadyExists = errors.New("already exists")
	errPrecondition  = errors.New("failed precondition")
	errUnavailable   = store.ErrUnavailable
)

// grpcError maps any error to a gRPC status, in one place: typed engine
// errors, pkg/sandbox validation errors and the handler sentinels above.
// The message keeps the whole chain, which names the object and the step.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codeOf(err), err.Error())
}

func codeOf(err error) codes.Code {
	switch {
	case errors.Is(err, errNotFound):
		return codes.NotFound
	case errors.Is(err, errAlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, errPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, errUnavailable):
		return codes.Unavailable
	case errors.Is(err, sandbox.ErrUnsupported):
		return codes.Unimplemented
	case errors.Is(err, sandbox.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		// The state dir's filesystem is full (the message names the
		// file): kubelet retries, and the call works once there is room.
		return codes.ResourceExhausted
	}
	switch dockerapi.KindOf(err) {
	case dockerapi.KindNotFound:
		return codes.NotFound
	case dockerapi.KindConflict:
		return codes.AlreadyExists
	case dockerapi.KindInvalid:
		return codes.InvalidArgument
	case dockerapi.KindUnavailable:
		return codes.Unavailable
	case dockerapi.KindForbidden:
		return codes.PermissionDenied
	case dockerapi.KindCanceled:
		return codes.Canceled
	}
	return codes.Unknown
}
