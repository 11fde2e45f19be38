package remote

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/suite"
)

// refusals: what must not connect does not, over the real sshd and the
// engine's real TLS listener; and cri-compose reports why.
func refusals(t *testing.T, h *host) {
	ping := func(host string, e dockerapi.Endpoint) error {
		t.Helper()
		c, err := dockerapi.New(host, dockerapi.WithEndpoint(e))
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = c.Ping(ctx)
		return err
	}
	empty := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	good := dockerapi.SSHConfig{KnownHostsFile: h.knownHost, IdentityFiles: []string{h.identity}}
	for _, c := range []struct {
		name, host string
		e          dockerapi.Endpoint
		want       string // "" = must connect
	}{
		{"ssh", h.sshURL, dockerapi.Endpoint{SSH: good}, ""},
		{"ssh unknown host key", h.sshURL, dockerapi.Endpoint{SSH: dockerapi.SSHConfig{KnownHostsFile: empty, IdentityFiles: []string{h.identity}}}, "key is unknown"},
		{"ssh unknown host key, allowed", h.sshURL, dockerapi.Endpoint{SSH: dockerapi.SSHConfig{KnownHostsFile: empty, InsecureIgnoreHostKey: true, IdentityFiles: []string{h.identity}}}, ""},
		{"ssh key not authorized", h.sshURL, dockerapi.Endpoint{SSH: dockerapi.SSHConfig{KnownHostsFile: h.knownHost, IdentityFiles: []string{filepath.Join(h.sshd.Dir, "host_ed25519")}}}, "unable to authenticate"},
		{"ssh no engine at that path", strings.TrimSuffix(h.sshURL, h.pe.Sock()) + "/nonexistent/docker.sock", dockerapi.Endpoint{SSH: good}, "open failed"},
		{"tls", h.tlsURL, dockerapi.Endpoint{CertPath: h.clientDir}, ""},
		{"tls client cert from another CA", h.tlsURL, dockerapi.Endpoint{CertPath: h.rogueDir}, "certificate"},
		{"tls server not signed by our CA", h.tlsURL, dockerapi.Endpoint{CertPath: h.otherCA}, "certificate signed by unknown authority"},
		{"plain tcp to a remote address", h.tlsURL, dockerapi.Endpoint{}, "plain TCP"},
	} {
		err := ping(c.host, c.e)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want connected", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want refused with %q", c.name, err, c.want)
		case c.want != "" && dockerapi.KindOf(err) != dockerapi.KindUnavailable && !strings.Contains(c.want, "plain"):
			t.Errorf("%s: %v is not Unavailable", c.name, err)
		}
	}

	// cri-compose with an unknown host key: up, not ready, and says why.
	d := suite.NewDaemon(t, suite.DaemonConfig{DockerHost: h.sshURL, Args: []string{"--ssh-known-hosts", empty, "--ssh-identity-file", h.identity}, NoReady: true})
	d.Start()
	ok, why := d.Ready()
	if ok || !strings.Contains(why, "key is unknown") {
		t.Errorf("cri-compose with an unknown host key: ready %v (%s), want not ready because of the key", ok, why)
	}
	// A wrong client certificate: the same.
	d2 := suite.NewDaemon(t, suite.DaemonConfig{DockerHost: h.tlsURL, Args: []string{"--docker-cert-path", h.rogueDir}, NoReady: true})
	d2.Start()
	if ok, why := d2.Ready(); ok || !strings.Contains(why, "certificate") {
		t.Errorf("cri-compose with a wrong client certificate: ready %v (%s), want not ready because of it", ok, why)
	}
}
