package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// portForwardDialTimeout bounds the connection to the pod's port.
const portForwardDialTimeout = 10 * time.Second

// PortForward checks that the pod sandbox is ready and returns a
// single-use URL on the streaming server (streaming.go) through which the
// client forwards connections to the pod's ports.
func (s *Server) PortForward(ctx context.Context, r *runtime.PortForwardRequest) (*runtime.PortForwardResponse, error) {
	sb, err := s.readySandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, grpcError(err)
	}
	for _, p := range r.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, grpcError(fmt.Errorf("%w: port %d is out of range", sandbox.ErrInvalid, p))
		}
	}
	lib, err := s.stream.server()
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(r)
	req.PodSandboxId = sb.ID
	resp, err := lib.GetPortForward(req)
	return resp, grpcError(err)
}

// readySandbox is the record of a ready pod sandbox, or NotFound or
// FailedPrecondition.
func (s *Server) readySandbox(id string) (sandboxRec, error) {
	sb, err := s.store.Sandbox(id)
	if err != nil {
		return sandboxRec{}, err
	}
	if sb.State != runtime.PodSandboxState_SANDBOX_READY {
		return sandboxRec{}, fmt.Errorf("port-forward to pod sandbox %s: it is not ready: %w", sb.ID, errPrecondition)
	}
	return sb, nil
}

// PortForward connects one forwarded connection to port of the pod: it
// dials the port from this process, with no socat or nsenter, and copies
// both ways. The pod's address is its IP on the pod network, or loopback
// for a pod on the host's network.
//
// This needs the engine to be local: the pod network (and, for host-network
// pods, the engine host's loopback) must be reachable from here. For a
// remote engine, a relay exec'd in the sandbox carries the connection over
// the engine's API instead (sandbox_portforward_engine.go).
//
// A refused or unreachable port is returned as an error, which the library
// writes on the client's error stream.
func (r streamRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	ctx, cancel := r.session(ctx)
	defer cancel()
	sb, err := r.s.readySandbox(podSandboxID)
	if err != nil {
		return err
	}
	if !r.s.docker.IsLocal() {
		// The pod network is on the engine's host: through the engine
		// (sandbox_portforward_engine.go).
		return r.portForwardEngine(ctx, sb, port, stream)
	}
	host := sb.IP
	if host == "" {
		host = sb.IPv6 // an IPv6-only pod network
	}
	if sb.Service.NetworkMode == "host" ||
		sb.Config.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtime.NamespaceMode_NODE {
		host = "127.0.0.1"
	}
	if host == "" {
		return fmt.Errorf("port-forward to pod sandbox %s: it has no IP on network %s", sb.ID, sb.Network)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	d := net.Dialer{Timeout: portForwardDialTimeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%w (nothing listens on port %d in the pod)", err, port)
	}
	if err != nil {
		return err // the library names the port and the pod
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	// Client to pod: at the client's EOF the pod's side is half-closed,
	// and the answer still flows back; on an error (the client reset
	// the stream) the connection is closed.
	go func() {
		_, err := io.Copy(conn, stream)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
			return
		}
		conn.Close()
	}()
	// Pod to client, until the pod closes its side.
	_, err = io.Copy(stream, conn)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
