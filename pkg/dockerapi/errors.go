package dockerapi

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Kind classifies an engine error so that callers (pkg/cri) can map it to a
// gRPC code in one place without matching strings.
type Kind int

const (
	KindUnknown Kind = iota
	KindNotFound
	KindConflict
	KindInvalid
	KindUnavailable
	KindForbidden
	KindCanceled
)

// Error is an engine error with the operation and object it concerns.
type Error struct {
	Kind Kind
	Op   string // engine operation, e.g. "create container"
	Ref  string // the object the operation was about
	Err  error
}

func (e *Error) Error() string {
	if e.Ref != "" {
		return fmt.Sprintf("%s %s: %v", e.Op, e.Ref, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// wrap turns an error from the moby client into an *Error with a Kind.
func wrap(op, ref string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: classify(err), Op: op, Ref: ref, Err: err}
}

func classify(err error) Kind {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return KindCanceled
	case client.IsErrConnectionFailed(err), cerrdefs.IsUnavailable(err):
		return KindUnavailable
	case cerrdefs.IsNotFound(err):
		return KindNotFound
	case cerrdefs.IsConflict(err), cerrdefs.IsAlreadyExists(err):
		return KindConflict
	case cerrdefs.IsInvalidArgument(err):
		return KindInvalid
	case cerrdefs.IsPermissionDenied(err), cerrdefs.IsUnauthorized(err):
		return KindForbidden
	}
	return KindUnknown
}

// KindOf returns the Kind of err, looking through wrapping.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	if err == nil {
		return KindUnknown
	}
	return classify(err)
}

// IsNotFound reports whether err says the object does not exist.
func IsNotFound(err error) bool { return KindOf(err) == KindNotFound }

// IsConflict reports whether err says the object exists or is in use.
func IsConflict(err error) bool { return KindOf(err) == KindConflict }

// IsUnavailable reports whether err says the engine could not be reached.
func IsUnavailable(err error) bool { return KindOf(err) == KindUnavailable }
