package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/tracing"
	"github.com/cri-compose/cri-compose/test/suite"
)

// TestRunPodSandboxTrace collects the spans of one RunPodSandbox with an
// in-process exporter: the CRI call is a span (the child of the caller's,
// sent as W3C trace context the way kubelet sends it), and the engine
// calls it made are its children.
func TestRunPodSandboxTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider("cri-compose-test", "test", sdktrace.WithSyncer(exp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	env := suite.StartServer(t, suite.ServerOptions{
		Docker: []dockerapi.Option{dockerapi.WithTracerProvider(tp)},
		GRPC:   []grpc.ServerOption{tracing.ServerOption(tp)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The caller's span, sent along as kubelet does.
	callerCtx, caller := tp.Tracer("test").Start(ctx, "kubelet SyncPod")
	carrier := propagation.MapCarrier{}
	tracing.Propagator.Inject(callerCtx, carrier)
	var md []string
	for k, v := range carrier {
		md = append(md, k, v)
	}
	pod := env.PodConfig("trace")
	exp.Reset()
	resp, err := env.RT.RunPodSandbox(metadata.AppendToOutgoingContext(ctx, md...), &runtime.RunPodSandboxRequest{Config: pod})
	caller.End()
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = env.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: resp.GetPodSandboxId()})
		_, _ = env.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: resp.GetPodSandboxId()})
	})

	// The server ends its span as the response goes out: wait for it.
	const rpcName = "runtime.v1.RuntimeService/RunPodSandbox"
	var rpc tracetest.SpanStub
	deadline := time.Now().Add(10 * time.Second)
	for rpc.Name == "" {
		for _, s := range exp.GetSpans() {
			if s.Name == rpcName {
				rpc = s
			}
		}
		if rpc.Name == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no %s span among %v", rpcName, names(exp.GetSpans()))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if rpc.SpanKind != trace.SpanKindServer {
		t.Errorf("%s span kind %v, want server", rpcName, rpc.SpanKind)
	}
	if rpc.Parent.SpanID() != caller.SpanContext().SpanID() || rpc.SpanContext.TraceID() != caller.SpanContext().TraceID() {
		t.Errorf("%s span's parent is %v, want the caller's span %v", rpcName, rpc.Parent, caller.SpanContext())
	}

	var children []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Parent.SpanID() == rpc.SpanContext.SpanID() {
			children = append(children, s)
		}
	}
	t.Logf("%s (%v) has %d child spans: %v", rpcName, rpc.EndTime.Sub(rpc.StartTime).Round(time.Microsecond), len(children), names(children))
	// The sandbox's container is created and started through the engine.
	for _, want := range []struct{ method, suffix string }{
		{"POST", "/containers/create"},
		{"POST", "/start"},
		{"GET", "/json"}, // inspect (store refresh)
	} {
		found := false
		for _, s := range children {
			if strings.HasPrefix(s.Name, want.method+" ") && strings.HasSuffix(s.Name, want.suffix) {
				found = true
				if s.SpanKind != trace.SpanKindClient {
					t.Errorf("engine span %s: kind %v, want client", s.Name, s.SpanKind)
				}
				if s.StartTime.Before(rpc.StartTime) || s.EndTime.After(rpc.EndTime) {
					t.Errorf("engine span %s is not within the RPC span", s.Name)
				}
			}
		}
		if !found {
			t.Errorf("no engine child span %s …%s under %s; children: %v", want.method, want.suffix, rpcName, names(children))
		}
	}
}

func names(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
