// Package dockerapi is cri-compose's only road to the Docker Engine. It wraps
// the moby client with version negotiation (Engine API 1.41 and up), a
// context on every call, typed errors, and one shared event stream.
package dockerapi

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"
)

// MinAPIVersion is the oldest Engine API we support: Docker 20.10, as shipped
// by Debian 12. Features from newer APIs must degrade below their version.
const MinAPIVersion = "1.41"

// Client talks to one Docker Engine.
type Client struct {
	api  *client.Client
	host string
	// tunnel carries an ssh:// endpoint's connections (nil otherwise).
	tunnel *sshTunnel
	m      *metrics // metrics.go

	// netMu serialises EnsureNetwork in this process: engines before API
	// 1.44 let racing creates make two networks of one name.
	netMu sync.Mutex
}

// New returns a client for host ("unix:///var/run/docker.sock",
// "tcp://host:2376" with TLS, "ssh://user@host[:port][/socket]"; see
// Endpoint and SSHConfig); an empty host means $DOCKER_HOST or the local
// socket. It does not contact the engine: the API version is negotiated on
// the first call, so cri-compose can start while the engine is down (or
// its host unreachable) and report it not ready.
func New(host string, with ...Option) (*Client, error) {
	if host == "" {
		host = os.Getenv(client.EnvOverrideHost)
	}
	if host == "" {
		host = client.DefaultDockerHost
	}
	var o options
	for _, f := range with {
		f(&o)
	}
	// Not client.FromEnv: its TLS from the environment skips verifying
	// the server unless DOCKER_TLS_VERIFY is set (dial_tls.go always does).
	hopts, tunnel, err := hostOpts(host, o.endpoint) // dial_tls.go, dial_ssh.go
	if err != nil {
		return nil, err
	}
	opts := append([]client.Opt{client.WithAPIVersionFromEnv()}, hopts...)
	opts = append(opts, clientOpts(o)...) // options.go
	c, err := client.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker client for %q: %w", host, err)
	}
	return &Client{api: c, host: host, tunnel: tunnel, m: newMetrics()}, nil
}

// Host is the engine endpoint this client talks to.
func (c *Client) Host() string { return c.host }

// IsLocal reports whether the engine runs on this machine (unix socket), so
// that host facts read here (capabilities, cgroups) are the engine's too.
func (c *Client) IsLocal() bool {
	return strings.HasPrefix(c.host, "unix://")
}

// SharesFilesystem reports whether paths on this machine are paths on the
// engine's host, judged from the endpoint alone: a unix socket or TCP to
// loopback. ssh:// and TCP to another address do not.
func (c *Client) SharesFilesystem() bool {
	scheme, rest, _ := strings.Cut(c.host, "://")
	switch scheme {
	case "unix":
		return true
	case "tcp":
		u, err := url.Parse("tcp://" + rest)
		return err == nil && IsLoopbackHost(u.Hostname())
	}
	return false
}

// Close releases idle connections (and the SSH tunnel).
func (c *Client) Close() error {
	if c.tunnel != nil {
		c.tunnel.close()
	}
	return c.api.Close()
}

// APIVersion is the negotiated Engine API version ("" before the first call).
func (c *Client) APIVersion() string { return c.api.ClientVersion() }

// Ping checks that the engine answers and negotiates the API version; it
// refuses engines older than MinAPIVersion.
func (c *Client) Ping(ctx context.Context) (_ string, err error) {
	defer c.observe("ping engine", time.Now(), &err)
	p, err := c.api.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
	if err != nil {
		return "", wrap("ping engine", c.host, err)
	}
	if p.APIVersion != "" && versionLess(p.APIVersion, MinAPIVersion) {
		return p.APIVersion, &Error{Kind: KindUnavailable, Op: "ping engine", Ref: c.host,
			Err: fmt.Errorf("engine API %s is older than the supported minimum %s", p.APIVersion, MinAPIVersion)}
	}
	return p.APIVersion, nil
}

// Version describes the engine.
type Version struct {
	Version    string // engine version, e.g. 20.10.24
	APIVersion string // highest API the engine supports
}

// ServerVersion returns the engine's version.
func (c *Client) ServerVersion(ctx context.Context) (_ Version, err error) {
	defer c.observe("engine version", time.Now(), &err)
	v, err := c.api.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return Version{}, wrap("engine version", c.host, err)
	}
	return Version{Version: v.Version, APIVersion: v.APIVersion}, nil
}

// Info returns the engine's system information.
func (c *Client) Info(ctx context.Context) (_ system.Info, err error) {
	defer c.observe("engine info", time.Now(), &err)
	r, err := c.api.Info(ctx, client.InfoOptions{})
	if err != nil {
		return system.Info{}, wrap("engine info", c.host, err)
	}
	return r.Info, nil
}

// versionLess compares dotted API versions ("1.41" < "1.9" is false).
func versionLess(a, b string) bool {
	var amaj, amin, bmaj, bmin int
	// A part that does not parse counts as 0.
	_, _ = fmt.Sscanf(a, "%d.%d", &amaj, &amin)
	_, _ = fmt.Sscanf(b, "%d.%d", &bmaj, &bmin)
	if amaj != bmaj {
		return amaj < bmaj
	}
	return amin < bmin
}

// AtLeast reports whether the negotiated API is at least v, for features that
// need a newer engine than MinAPIVersion.
func (c *Client) AtLeast(v string) bool { return APIAtLeast(c.api.ClientVersion(), v) }

// APIAtLeast reports whether API version have ("1.44") is v or newer; an
// empty one (not negotiated yet) is none.
func APIAtLeast(have, v string) bool { return have != "" && !versionLess(have, v) }
