// Package forward runs client-go's port forwarder, as kubectl port-forward
// does, for the tests that reach a pod's port through a streaming URL: a
// CRI PortForward URL of cri-compose's streaming server (pkg/cri,
// test/remote) or the API server's pods/portforward (test/vk).
package forward

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// Dialer is an SPDY dialer for the streaming URL rawURL. cfg is the API
// server's config; an empty one suits the runtime's streaming server,
// which is plain HTTP without authentication.
func Dialer(cfg *rest.Config, rawURL string) (httpstream.Dialer, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	tr, up, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	return spdy.NewDialerForStreaming(up, &http.Client{Transport: tr}, http.MethodPost, u), nil
}

// Forward is a running forward from a free port of 127.0.0.1 to a pod's
// port.
type Forward struct {
	// Local is the forwarded port of 127.0.0.1.
	Local uint16

	stop   chan struct{}
	once   sync.Once
	done   chan error
	errOut lockedBuffer
}

// Start forwards a free port of 127.0.0.1 to port through d and waits up
// to timeout for it to listen. The forward stops at Close or when t ends.
func Start(t testing.TB, d httpstream.Dialer, port int, timeout time.Duration) *Forward {
	t.Helper()
	f := &Forward{stop: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan struct{})
	pf, err := portforward.NewOnAddressesForStreaming(d, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, f.stop, ready, io.Discard, &f.errOut)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	go func() { f.done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-f.done:
		t.Fatalf("ForwardPorts: %v (%s)", err, f.errOut.String())
	case <-time.After(timeout):
		t.Fatalf("port forward not ready after %v", timeout)
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v, %v", ports, err)
	}
	f.Local = ports[0].Local
	return f
}

// Close stops the forward; ForwardPorts then returns (see Wait).
func (f *Forward) Close() { f.once.Do(func() { close(f.stop) }) }

// Wait returns ForwardPorts' error once it has returned (after Close, or
// on its own when the forward failed), and fails t if it still runs after
// timeout.
func (f *Forward) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-f.done:
		return err
	case <-time.After(timeout):
		t.Fatalf("ForwardPorts still running after %v", timeout)
		return nil
	}
}

// Ended reports whether ForwardPorts returned within timeout, and its
// error if it did; unlike Wait, a forward still running is not a failure.
func (f *Forward) Ended(timeout time.Duration) (bool, error) {
	select {
	case err := <-f.done:
		f.done <- err // for a later Wait or Ended
		return true, err
	case <-time.After(timeout):
		return false, nil
	}
}

// Get GETs path through the forward on a connection of its own (each one
// is a new stream pair of the session) and returns the status code and
// body; err is for the connection, not the status.
func (f *Forward) Get(path string) (code int, body string, err error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", f.Local, path))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// lockedBuffer keeps the forwarder's error output, written from its
// connection goroutines, for Start's failure message.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
