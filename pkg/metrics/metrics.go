// Package metrics assembles cri-compose's Prometheus metrics and serves them:
// the CRI gRPC server's per-RPC counts, codes and latencies (through
// go-grpc-middleware's Prometheus provider), the Go runtime and process
// collectors, and whatever the runtime and the engine client contribute
// (cri.Server.Collectors, dockerapi.Client.Collectors).
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// Path is where Serve answers.
const Path = "/metrics"

// rpcBuckets span a cheap List call (a millisecond) to an image pull
// (minutes).
var rpcBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Metrics is one program's registry.
type Metrics struct {
	reg  *prometheus.Registry
	grpc *grpcprom.ServerMetrics
}

// New returns a registry holding the gRPC server metrics
// (grpc_server_started_total, grpc_server_handled_total{grpc_code},
// grpc_server_handling_seconds, grpc_server_msg_{received,sent}_total, each
// by grpc_service and grpc_method) and the Go and process collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets(rpcBuckets))),
	}
	m.reg.MustRegister(m.grpc, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Register adds collectors (cri.Server.Collectors,
// dockerapi.Client.Collectors) to the registry.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// ServerOptions install the gRPC metrics middleware on a server.
func (m *Metrics) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(m.grpc.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(m.grpc.StreamServerInterceptor()),
	}
}

// Gatherer is the registry, for tests and other exporters.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves the registry in the Prometheus text (or OpenMetrics)
// format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// Serve listens on addr (host:port; port 0 picks one) and serves Path until
// ctx ends. It returns once listening, with the address it listens on; a
// failure to listen is returned, later serving errors are logged.
func (m *Metrics) Serve(ctx context.Context, addr string) (net.Addr, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Metrics server stopped", "address", l.Addr().String())
		}
	}()
	context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	return l.Addr(), nil
}
