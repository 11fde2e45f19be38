package dockerapi

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/moby/client"
)

// Endpoint is how to reach an engine that is not on a local unix socket.
type Endpoint struct {
	// CertPath is the folder of ca.pem, cert.pem and key.pem for tcp://
	// (the engine's DOCKER_CERT_PATH convention). Default: $DOCKER_CERT_PATH,
	// or ~/.docker when $DOCKER_TLS_VERIFY is set. With a cert path the
	// connection is TLS and the server's certificate is always verified
	// against ca.pem: unlike the docker CLI, an unset DOCKER_TLS_VERIFY does
	// not turn verification off.
	CertPath string
	// AllowPlainTCP allows tcp:// without TLS to a host that is not a
	// loopback address. Without TLS anyone on the path can drive the
	// engine, that is be root on its host, so this is refused by default.
	AllowPlainTCP bool
	// SSH configures ssh:// endpoints.
	SSH SSHConfig
}

// WithEndpoint sets how tcp:// and ssh:// endpoints are reached.
func WithEndpoint(e Endpoint) Option {
	return func(o *options) { o.endpoint = e }
}

// hostOpts are the client options that reach host: the socket, TLS over
// TCP, or the SSH tunnel (returned so the Client can close it).
func hostOpts(host string, e Endpoint) ([]client.Opt, *sshTunnel, error) {
	scheme, _, _ := strings.Cut(host, "://")
	switch scheme {
	case "unix":
		return []client.Opt{client.WithHost(host)}, nil, nil
	case "tcp":
		opts, err := tcpOpts(host, e)
		return opts, nil, err
	case "ssh":
		t, err := newSSHTunnel(host, e.SSH)
		if err != nil {
			return nil, nil, err
		}
		// The client speaks to "a unix socket" (no proxy, no compression);
		// every connection is a channel of the tunnel instead.
		return []client.Opt{client.WithHost("unix://" + t.socket), client.WithDialContext(t.DialContext)}, t, nil
	}
	return nil, nil, fmt.Errorf("docker host %q: want unix://, tcp:// or ssh://", host)
}

// tcpOpts: TLS with a verified server certificate when there is a cert
// path; plain TCP only to loopback unless allowed.
func tcpOpts(host string, e Endpoint) ([]client.Opt, error) {
	u, err := url.Parse(host)
	if err != nil || u.Hostname() == "" {
		return nil, fmt.Errorf("docker host %q: want tcp://host:port", host)
	}
	if u.Port() == "" {
		return nil, fmt.Errorf("docker host %q: name the port (2376 for TLS, by convention)", host)
	}
	opts := []client.Opt{client.WithHost(host)}
	dir := e.CertPath
	if dir == "" {
		dir = os.Getenv(client.EnvOverrideCertPath)
	}
	if dir == "" && os.Getenv(client.EnvTLSVerify) != "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".docker")
	}
	if dir == "" {
		if !IsLoopbackHost(u.Hostname()) && !e.AllowPlainTCP {
			return nil, fmt.Errorf("docker host %s: plain TCP to a host that is not loopback gives anyone on the path root on the engine's host; "+
				"use TLS (--docker-cert-path or $DOCKER_CERT_PATH with ca.pem, cert.pem, key.pem), ssh://, or --docker-allow-plain-tcp", host)
		}
		return opts, nil
	}
	ca := filepath.Join(dir, "ca.pem")
	if _, err := os.Stat(ca); err != nil {
		return nil, fmt.Errorf("docker host %s: TLS needs the engine's CA to verify it: %w", host, err)
	}
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if _, err := os.Stat(cert); err != nil {
		// An engine without --tlsverify needs no client certificate.
		cert, key = "", ""
	}
	return append(opts, client.WithTLSClientConfig(ca, cert, key)), nil
}

// IsLoopbackHost reports whether h (an IP or a name) is this machine's
// loopback: a literal loopback IP or "localhost".
func IsLoopbackHost(h string) bool {
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(h, "localhost")
}
