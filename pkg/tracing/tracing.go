// Package tracing sets up OpenTelemetry tracing for cri-compose: a tracer
// provider exporting over OTLP/gRPC, and the gRPC server option that makes
// every CRI call a span. Engine calls become child spans through the
// context (dockerapi.WithTracerProvider), so one slow RunPodSandbox shows
// which engine calls its time went to.
package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Propagator reads and writes W3C trace context and baggage: a kubelet
// with tracing on sends its span's context with every CRI call, and the
// CRI span becomes its child.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// NewOTLP returns a tracer provider that batches spans to an OTLP/gRPC
// collector at endpoint: "http://host:port" (plain text), "https://host:port"
// (TLS), or a bare "host:port" (plain text, like http://). The usual
// OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates) and
// OTEL_TRACES_SAMPLER apply; the default sampler follows the caller's
// decision and samples every call that has none. Call Shutdown on exit to
// flush.
func NewOTLP(ctx context.Context, endpoint, service, version string) (*sdktrace.TracerProvider, error) {
	var opts []otlptracegrpc.Option
	if strings.Contains(endpoint, "://") {
		if !strings.HasPrefix(endpoint, "http://") && !strings.HasPrefix(endpoint, "https://") {
			return nil, fmt.Errorf("otlp endpoint %q: scheme must be http or https", endpoint)
		}
		opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
	} else {
		opts = append(opts, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter for %s: %w", endpoint, err)
	}
	return NewProvider(service, version, sdktrace.WithBatcher(exp))
}

// NewProvider returns a tracer provider for service, configured by opts
// (where its spans go: tests use an in-memory exporter).
func NewProvider(service, version string, opts ...sdktrace.TracerProviderOption) (*sdktrace.TracerProvider, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.version", version),
	))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...), nil
}

// ServerOption makes every call to the gRPC server a span of tp named after
// its method (runtime.v1.RuntimeService/RunPodSandbox), the child of the
// caller's span when the caller sent one.
func ServerOption(tp trace.TracerProvider) grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(Propagator),
	))
}
