package vk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

// Runtime is the CRI runtime and image services vk-cri drives: the
// interfaces of k8s.io/cri-api, which k8s.io/cri-client implements over
// gRPC and k8s.io/cri-api's testing package fakes.
type Runtime struct {
	internalapi.RuntimeService
	Images internalapi.ImageManagerService
}

// Dial connects to the CRI runtime at endpoint (unix:///path), for both
// services. timeout bounds each unary call (image pulls excepted: they take
// the context's deadline).
func Dial(ctx context.Context, endpoint string, timeout time.Duration) (*Runtime, error) {
	// Unary list calls, set rather than left to the builder, whose default
	// is to turn to streaming in a later release. The tracer provider is
	// the builder's no-op one.
	rs, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(timeout).
		WithUseStreaming(false).
		Build(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to CRI runtime %s: %w", endpoint, err)
	}
	is, err := remote.NewRemoteImageServiceBuilder().
		WithEndpoint(endpoint).
		WithConnectionTimeout(timeout).
		WithUseStreaming(false).
		Build(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to CRI image service %s: %w", endpoint, err)
	}
	return Instrument(&Runtime{RuntimeService: rs, Images: is}), nil
}

// Close closes both connections.
func (r *Runtime) Close(ctx context.Context) error {
	return errors.Join(r.RuntimeService.Close(ctx), r.Images.Close(ctx))
}

// isNotFound reports whether a CRI call failed because the object is gone.
func isNotFound(err error) bool {
	return status.Code(err) == codes.NotFound
}

// isUnimplemented reports whether the runtime does not offer the call.
func isUnimplemented(err error) bool {
	return status.Code(err) == codes.Unimplemented
}
