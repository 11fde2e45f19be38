package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/metrics"
	"github.com/cri-compose/cri-compose/pkg/tracing"
)

// telemetry is one run's optional metrics (--metrics-address) and tracing
// (--otlp-endpoint); both are off unless set.
type telemetry struct {
	metricsAddress string
	metrics        *metrics.Metrics         // nil: off
	tp             *sdktrace.TracerProvider // nil: off
	stop           context.CancelFunc
}

func startTelemetry(fc *fileConfig) (*telemetry, error) {
	t := &telemetry{metricsAddress: fc.MetricsAddress, stop: func() {}}
	if fc.MetricsAddress != "" {
		t.metrics = metrics.New()
	}
	if fc.OTLPEndpoint != "" {
		tp, err := tracing.NewOTLP(context.Background(), fc.OTLPEndpoint, "cri-compose", cri.Version)
		if err != nil {
			return nil, err
		}
		t.tp = tp
		// Export failures (collector down) go to the log like the rest.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { klog.ErrorS(err, "Tracing") }))
		klog.InfoS("Tracing to OTLP collector", "endpoint", fc.OTLPEndpoint)
	}
	return t, nil
}

// dockerOptions make engine calls children of the CRI call's span.
func (t *telemetry) dockerOptions() []dockerapi.Option {
	if t.tp == nil {
		return nil
	}
	return []dockerapi.Option{dockerapi.WithTracerProvider(t.tp)}
}

// serverOptions install the gRPC metrics middleware and the tracing stats
// handler.
func (t *telemetry) serverOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if t.metrics != nil {
		opts = append(opts, t.metrics.ServerOptions()...)
	}
	if t.tp != nil {
		opts = append(opts, tracing.ServerOption(t.tp))
	}
	return opts
}

// serveMetrics registers the collectors and serves them until shutdown.
func (t *telemetry) serveMetrics(cs ...[]prometheus.Collector) error {
	if t.metrics == nil {
		return nil
	}
	for _, c := range cs {
		if err := t.metrics.Register(c...); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := t.metrics.Serve(ctx, t.metricsAddress)
	if err != nil {
		cancel()
		return err
	}
	t.stop = cancel
	klog.InfoS("Serving metrics", "url", "http://"+addr.String()+metrics.Path)
	return nil
}

// shutdown stops the metrics server and flushes the spans not yet sent.
func (t *telemetry) shutdown() {
	t.stop()
	if t.tp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := t.tp.Shutdown(ctx); err != nil {
			klog.ErrorS(err, "Flushing traces")
		}
	}
}
