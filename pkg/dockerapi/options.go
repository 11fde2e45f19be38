package dockerapi

import (
	"github.com/moby/moby/client"
	"go.opentelemetry.io/otel/trace"
)

// Option configures a Client (New).
type Option func(*options)

type options struct {
	tracerProvider trace.TracerProvider
	endpoint       Endpoint // dial_tls.go
}

// WithTracerProvider makes every engine call a span of tp (the moby client
// instruments its HTTP transport with otelhttp): a child of the span in the
// call's context, so a CRI call's engine calls show under its span. Without
// it the client uses the global provider, which does nothing unless the
// program set one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

func clientOpts(o options) []client.Opt {
	var out []client.Opt
	if o.tracerProvider != nil {
		out = append(out, client.WithTraceProvider(o.tracerProvider))
	}
	return out
}
