package cri

// The streaming server behind Exec, Attach and PortForward: the RPCs hand
// out URLs, and the upstream library k8s.io/cri-streaming (the one kubelet
// and containerd use) serves them on a listener of its own, calling back
// into streamRuntime (container_exec.go, container_attach.go,
// sandbox_portforward.go) once a client connects.
//
// The URLs are single-use and expire: the library keeps each request in a
// token cache that forgets it when it is first consumed or after one minute,
// whichever comes first (k8s.io/cri-streaming/pkg/streaming/request_cache.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/cri-streaming/pkg/streaming"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

const (
	// DefaultStreamAddress is where the streaming server listens unless
	// told otherwise: loopback, on a free port, like kubelet's own
	// streaming server (containerd: stream_server_address/port).
	DefaultStreamAddress = "127.0.0.1:0"
	// DefaultStreamIdleTimeout closes a streaming connection with no
	// traffic for this long (kubelet's --streaming-connection-idle-timeout
	// and containerd's stream_idle_timeout default to the same).
	DefaultStreamIdleTimeout = 4 * time.Hour
	// streamCreationTimeout bounds how long a client may take to open its
	// SPDY streams after connecting (the library's default, 30s).
	streamCreationTimeout = remotecommandserver.DefaultStreamCreationTimeout
)

// streamServer is the streaming server's listener and HTTP server around
// the library's handler. It listens as soon as it is made, so the URLs the
// RPCs hand out are right from the first call; it serves once started.
type streamServer struct {
	lib  streaming.Server // URL tokens and the exec/attach/port-forward handlers
	lis  net.Listener
	http *http.Server
	url  string
	err  error // why there is no streaming server (listening failed)

	// ctx ends when the server stops, and with it every open session.
	ctx    context.Context
	cancel context.CancelCauseFunc

	once sync.Once
}

// newStreamServer listens on addr (DefaultStreamAddress if empty; port 0
// picks a free port) and prepares the library's server for s. A failure is
// kept: the streaming RPCs then answer Unavailable, and StreamURL reports it.
func newStreamServer(addr string, idle time.Duration, s *Server) *streamServer {
	ctx, cancel := context.WithCancelCause(context.Background())
	st := &streamServer{ctx: ctx, cancel: cancel}
	rt := streamRuntime{s: s, done: ctx}
	if addr == "" {
		addr = DefaultStreamAddress
	}
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		st.err = fmt.Errorf("streaming server: listen on %s: %w", addr, err)
		return st
	}
	cfg := streaming.DefaultConfig
	// Addr is the bound address, so the URLs carry the real port; the
	// library's own Start (which listens again) is never used.
	cfg.Addr = advertisedAddr(addr, lis.Addr().(*net.TCPAddr))
	cfg.StreamIdleTimeout = idle
	cfg.StreamCreationTimeout = streamCreationTimeout
	lib, err := streaming.NewServer(cfg, rt)
	if err != nil {
		lis.Close()
		st.err = fmt.Errorf("streaming server: %w", err)
		return st
	}
	st.lib, st.lis = lib, lis
	st.url = "http://" + cfg.Addr
	st.http = &http.Server{
		Handler:           lib,
		ReadHeaderTimeout: 30 * time.Second,
		// Every request (and so every session, since the library passes
		// the request's context on) ends when the server stops.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	return st
}

// advertisedAddr is the host:port the URLs name: the bound address, or
// when the requested host was unspecified ("", 0.0.0.0, ::) the host's
// default address of that family (IPv4 for ""), loopback if it has none.
func advertisedAddr(requested string, bound *net.TCPAddr) string {
	ip := bound.IP
	if host, _, err := net.SplitHostPort(requested); err == nil {
		switch want := net.ParseIP(host); {
		case host == "":
			ip = net.IPv4zero
		case want != nil && want.IsUnspecified():
			ip = want
		}
	}
	if ip.IsUnspecified() {
		if hostIP, err := utilnet.ResolveBindAddress(ip); err == nil {
			ip = hostIP
		} else if ip.To4() != nil {
			ip = net.IPv4(127, 0, 0, 1)
		} else {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(bound.Port))
}

// start serves until ctx ends, then closes the listener and every open
// session. The returned channel closes once all of it has stopped.
func (st *streamServer) start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if st.err != nil {
		klog.ErrorS(st.err, "No exec, attach or port-forward")
		close(done)
		return done
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		klog.InfoS("Serving streaming (exec, attach, port-forward)", "url", st.url)
		if err := st.http.Serve(st.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Streaming server failed")
		}
	}()
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-served:
		}
		st.stop()
		<-served
	}()
	return done
}

// stop closes the listener and ends every session: hijacked connections
// are not the HTTP server's any more, so they end through st.ctx.
func (st *streamServer) stop() {
	st.once.Do(func() {
		st.cancel(errStreamServerStopped)
		if st.http != nil {
			st.http.Close()
		}
	})
}

// server is the library's server, or Unavailable when there is none.
func (st *streamServer) server() (streaming.Server, error) {
	if st.lib == nil {
		return nil, status.Error(codes.Unavailable, st.err.Error())
	}
	return st.lib, nil
}

// StreamURL is the base URL of the streaming server (exec, attach and
// port-forward URLs are under it), or why there is none.
func (s *Server) StreamURL() (string, error) {
	return s.stream.url, s.stream.err
}

// streamRuntime is what the library calls when a client uses a URL. Its
// methods run for as long as the session lasts.
type streamRuntime struct {
	s *Server
	// done ends when the streaming server stops.
	done context.Context
}

var _ streaming.Runtime = streamRuntime{}

// session is a context for one session: it ends with ctx (the client's
// request) or when the streaming server stops.
func (r streamRuntime) session(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(r.done, func() { cancel(errStreamServerStopped) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// errStreamServerStopped ends the sessions open when the server stops.
var errStreamServerStopped = errors.New("the streaming server stopped")

// resizeLoop applies the client's terminal sizes with resize until the
// channel closes or ctx ends. The first size comes right after the process
// starts, when the engine may not accept it yet: it is retried briefly, as
// the docker CLI does.
func resizeLoop(ctx context.Context, sizes <-chan remotecommandserver.TerminalSize, resize func(ctx context.Context, h, w uint) error) {
	first := true
	for {
		var sz remotecommandserver.TerminalSize
		var ok bool
		select {
		case <-ctx.Done():
			return
		case sz, ok = <-sizes:
			if !ok {
				return
			}
		}
		if sz.Height == 0 || sz.Width == 0 {
			continue
		}
		tries := 1
		if first {
			tries, first = 10, false
		}
		for i := 0; i < tries; i++ {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := resize(rctx, uint(sz.Height), uint(sz.Width))
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			if i == tries-1 {
				klog.V(2).InfoS("Terminal resize failed", "height", sz.Height, "width", sz.Width, "err", err)
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i+1) * 10 * time.Millisecond):
			}
		}
	}
}

// pipeStreams joins a client's streams to an engine stream: in is copied to
// the engine (half-closing it at EOF, so the process reads EOF), and the
// engine's output to out and errw, demultiplexed unless tty, until the
// output ends, which is when the process (or the attach) is over. It
// returns early with ctx's error when ctx ends, and with the error of a
// failed write when the client went away.
func pipeStreams(ctx context.Context, st *dockerapi.Stream, in io.Reader, out, errw io.Writer, tty bool) error {
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	if in != nil {
		go func() {
			if _, err := io.Copy(st.Conn, in); err == nil {
				_ = st.CloseWrite()
			}
		}()
	}
	if out == nil {
		out = io.Discard
	}
	if errw == nil {
		errw = io.Discard
	}
	var err error
	if tty {
		_, err = io.Copy(out, st.Reader)
	} else {
		_, err = stdcopy.StdCopy(out, errw, st.Reader)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// closeWriters closes the client's output streams once the process is done
// with them (nil ones are skipped).
func closeWriters(ws ...io.WriteCloser) {
	for _, w := range ws {
		if w != nil {
			w.Close()
		}
	}
}
