package cri_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/tracing"
	"github.com/cri-compose/cri-compose/test/criserver"
)

// lockedBuffer is klog's output, read while the server still writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// captureKlog sends klog's output at -v=10 to a buffer until t ends.
func captureKlog(t *testing.T) *lockedBuffer {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	old := map[string]string{}
	for name, v := range map[string]string{"v": "10", "logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL"} {
		old[name] = fs.Lookup(name).Value.String()
		if err := fs.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	buf := &lockedBuffer{}
	klog.SetOutput(buf)
	t.Cleanup(func() {
		klog.Flush()
		for name, v := range old {
			_ = fs.Set(name, v)
		}
		klog.SetOutput(os.Stderr)
	})
	return buf
}

// secretForms are the ways a value could show up in a log line or an
// attribute: as it is, and base64 (protobuf JSON's form of bytes, such as
// an environment value; the engine's form of registry credentials).
func secretForms(s string) []string {
	b := []byte(s)
	return []string{s,
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b)}
}

// spanText is everything a span carries that an exporter sends: name,
// attributes, events, status, links and resource.
func spanText(s tracetest.SpanStub) string {
	var b strings.Builder
	fmt.Fprintf(&b, "span %q status %v %q\n", s.Name, s.Status.Code, s.Status.Description)
	for _, kv := range s.Attributes {
		fmt.Fprintf(&b, "  attr %s=%s\n", kv.Key, kv.Value.String())
	}
	for _, e := range s.Events {
		fmt.Fprintf(&b, "  event %q\n", e.Name)
		for _, kv := range e.Attributes {
			fmt.Fprintf(&b, "    attr %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	for _, l := range s.Links {
		for _, kv := range l.Attributes {
			fmt.Fprintf(&b, "  link attr %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	if s.Resource != nil {
		for _, kv := range s.Resource.Attributes() {
			fmt.Fprintf(&b, "  resource %s=%s\n", kv.Key, kv.Value.String())
		}
	}
	return b.String()
}

// TestSecretsNeverLogged runs a pod whose environment, annotations and
// image pull credentials hold secrets through every RPC that carries or
// returns them, on the real engine, with klog at -v=10 and every span
// recorded (the gRPC server's and the engine client's, as the binary wires
// them), including requests that fail with the secrets in them. The
// secrets really reach the container (its output and ExecSync print them);
// no log line and no span attribute, event or status ever holds one, as
// it is or in base64. Log lines and spans may name env keys, never values.
func TestSecretsNeverLogged(t *testing.T) {
	logs := captureKlog(t)
	exp := tracetest.NewInMemoryExporter()
	tp, err := tracing.NewProvider("cri-compose-test", "test", sdktrace.WithSyncer(exp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	env := criserver.Start(t, criserver.Options{
		Docker: []dockerapi.Option{dockerapi.WithTracerProvider(tp)},
		GRPC:   []grpc.ServerOption{tracing.ServerOption(tp)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var secrets []string
	secret := func(what string) string {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		s := "s3cr3t" + what + hex.EncodeToString(b)
		secrets = append(secrets, s)
		return s
	}
	dbPassword, apiToken := secret("db"), secret("api")
	envs := []*runtime.KeyValue{{Key: "DB_PASSWORD", Value: []byte(dbPassword)}, {Key: "API_TOKEN", Value: []byte(apiToken)}}

	pod := env.PodConfig("secrets")
	pod.Annotations = map[string]string{"example.com/token": secret("podannotation")}
	pod.DnsConfig = &runtime.DNSConfig{Servers: []string{"127.0.0.1"}}
	ctrConfig := func(name, image string, extra ...*runtime.KeyValue) *runtime.ContainerConfig {
		return &runtime.ContainerConfig{
			Metadata:    &runtime.ContainerMetadata{Name: name},
			Image:       &runtime.ImageSpec{Image: image},
			Command:     []string{"sh", "-c", "echo password=$DB_PASSWORD token=$API_TOKEN; exec sleep 300"},
			Envs:        append(append([]*runtime.KeyValue(nil), envs...), extra...),
			Annotations: map[string]string{"example.com/ctr-token": secret("ctrannotation")},
			LogPath:     name + "/0.log",
		}
	}

	// Requests that fail, with secrets in them: the errors reach the
	// caller, the spans' status and maybe the log.
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"pull with credentials from a registry that is not there", func() error {
			_, err := env.Images.PullImage(ctx, &runtime.PullImageRequest{
				Image: &runtime.ImageSpec{Image: "127.0.0.1:1/secrets/nope:1"},
				Auth: &runtime.AuthConfig{Username: "u", Password: secret("password"), ServerAddress: "127.0.0.1:1",
					IdentityToken: secret("identity"), RegistryToken: secret("registry")},
			})
			return err
		}},
		{"pull with base64 credentials", func() error {
			_, err := env.Images.PullImage(ctx, &runtime.PullImageRequest{
				Image: &runtime.ImageSpec{Image: "127.0.0.1:1/secrets/nope:2"},
				Auth:  &runtime.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte("u:" + secret("auth")))},
			})
			return err
		}},
	} {
		if err := tc.call(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}

	run, err := env.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: pod})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	podID := run.GetPodSandboxId()
	for _, tc := range []struct {
		name string
		cfg  *runtime.ContainerConfig
	}{
		{"a value in an env name", ctrConfig("badname", criserver.Image, &runtime.KeyValue{Key: "LEAK=" + secret("inname"), Value: []byte("x")})},
		{"an image that is not there", ctrConfig("noimage", "localhost/cri-compose/no-such-image:"+hex.EncodeToString([]byte(podID[:4])))},
		{"a bad log path", func() *runtime.ContainerConfig {
			c := ctrConfig("badlog", criserver.Image)
			c.LogPath = "../" + c.LogPath
			return c
		}()},
	} {
		if _, err := env.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, SandboxConfig: pod, Config: tc.cfg}); err == nil {
			t.Errorf("CreateContainer with %s: no error", tc.name)
		}
	}

	cfg := ctrConfig("app", criserver.Image)
	cr, err := env.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: podID, SandboxConfig: pod, Config: cfg})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	id := cr.GetContainerId()
	if _, err := env.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
	// The values really went through: the container prints them.
	logPath := filepath.Join(pod.GetLogDirectory(), cfg.GetLogPath())
	want := "password=" + dbPassword + " token=" + apiToken
	deadline := time.Now().Add(30 * time.Second)
	for b, _ := os.ReadFile(logPath); !bytes.Contains(b, []byte(want)); b, _ = os.ReadFile(logPath) {
		if time.Now().After(deadline) {
			t.Fatalf("the container's log %s lacks %q after 30s: %q", logPath, want, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ex, err := env.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", "echo $DB_PASSWORD"}, Timeout: 10})
	if err != nil || strings.TrimSpace(string(ex.GetStdout())) != dbPassword {
		t.Fatalf("ExecSync echo $DB_PASSWORD: %q %v", ex.GetStdout(), err)
	}
	for _, call := range []func() error{
		func() error {
			_, err := env.RT.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: id, Verbose: true})
			return err
		},
		func() error {
			_, err := env.RT.PodSandboxStatus(ctx, &runtime.PodSandboxStatusRequest{PodSandboxId: podID, Verbose: true})
			return err
		},
		func() error { _, err := env.RT.ListContainers(ctx, &runtime.ListContainersRequest{}); return err },
		func() error { _, err := env.RT.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{}); return err },
		func() error {
			_, err := env.RT.ReopenContainerLog(ctx, &runtime.ReopenContainerLogRequest{ContainerId: id})
			return err
		},
		func() error {
			_, err := env.RT.UpdateContainerResources(ctx, &runtime.UpdateContainerResourcesRequest{ContainerId: id,
				Linux: &runtime.LinuxContainerResources{CpuShares: 512}, Annotations: map[string]string{"example.com/update": secret("update")}})
			return err
		},
		func() error {
			_, err := env.RT.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: id, Timeout: 1})
			return err
		},
		func() error {
			_, err := env.RT.RemoveContainer(ctx, &runtime.RemoveContainerRequest{ContainerId: id})
			return err
		},
		func() error {
			_, err := env.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: podID})
			return err
		},
		func() error {
			_, err := env.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: podID})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}

	// The server ends a call's span as its answer goes out.
	deadline = time.Now().Add(10 * time.Second)
	for !hasSpan(exp.GetSpans(), "runtime.v1.RuntimeService/RemovePodSandbox") {
		if time.Now().After(deadline) {
			t.Fatal("no RemovePodSandbox span after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	klog.Flush()

	out := logs.String()
	// The capture works at this verbosity: V(1) lines of this pod are there.
	if !strings.Contains(out, "Pod sandbox running") {
		t.Fatalf("klog output at -v=10 lacks the pod's V(1) line; captured:\n%s", out)
	}
	spans := exp.GetSpans()
	var traced strings.Builder
	for _, s := range spans {
		traced.WriteString(spanText(s))
	}
	if !strings.Contains(traced.String(), "CreateContainer") || !strings.Contains(traced.String(), "/containers/create") {
		t.Fatalf("the spans lack the CRI and engine calls:\n%s", traced.String())
	}
	for _, s := range secrets {
		for _, form := range secretForms(s) {
			if i := strings.Index(out, form); i >= 0 {
				t.Errorf("klog output holds a secret (%q): …%s…", form, out[max(0, i-300):min(len(out), i+100)])
			}
			for _, sp := range spans {
				if txt := spanText(sp); strings.Contains(txt, form) {
					t.Errorf("span %s holds a secret (%q):\n%s", sp.Name, form, txt)
				}
			}
		}
	}
	t.Logf("%d bytes of klog output at -v=10 and %d spans checked for %d secrets", len(out), len(spans), len(secrets))
}

func hasSpan(spans tracetest.SpanStubs, name string) bool {
	for _, s := range spans {
		if s.Name == name {
			return true
		}
	}
	return false
}
