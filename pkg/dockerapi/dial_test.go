package dockerapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestParseSSHHost(t *testing.T) {
	for _, c := range []struct{ in, user, addr, socket, err string }{
		{in: "ssh://bob@engine.example", user: "bob", addr: "engine.example:22", socket: DefaultRemoteSocket},
		{in: "ssh://bob@10.0.0.2:2222/run/user/1000/docker.sock", user: "bob", addr: "10.0.0.2:2222", socket: "/run/user/1000/docker.sock"},
		{in: "ssh://bob@[::1]:2200/", user: "bob", addr: "[::1]:2200", socket: DefaultRemoteSocket},
		{in: "ssh://bob:secret@host", err: "passwords"},
		{in: "ssh://", err: "want ssh://"},
		{in: "ssh://bob@host?x=1", err: "query"},
	} {
		user, addr, socket, err := parseSSHHost(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one about %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || user != c.user || addr != c.addr || socket != c.socket {
			t.Errorf("%s: %q %q %q %v, want %q %q %q", c.in, user, addr, socket, err, c.user, c.addr, c.socket)
		}
	}
}

func TestTCPEndpoints(t *testing.T) {
	t.Setenv("DOCKER_CERT_PATH", "")
	t.Setenv("DOCKER_TLS_VERIFY", "")
	for _, h := range []string{"tcp://127.0.0.1:2375", "tcp://localhost:2375", "tcp://[::1]:2375"} {
		if _, err := New(h); err != nil {
			t.Errorf("%s: %v, want plain TCP allowed to loopback", h, err)
		}
	}
	if _, err := New("tcp://192.0.2.1:2375"); err == nil || !strings.Contains(err.Error(), "plain TCP") {
		t.Errorf("plain TCP to another host: %v, want refused", err)
	}
	if _, err := New("tcp://192.0.2.1:2375", WithEndpoint(Endpoint{AllowPlainTCP: true})); err != nil {
		t.Errorf("plain TCP to another host, allowed: %v", err)
	}
	if _, err := New("tcp://192.0.2.1:2376", WithEndpoint(Endpoint{CertPath: t.TempDir()})); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("TLS without ca.pem: %v, want refused", err)
	}
	if _, err := New("tcp://192.0.2.1", WithEndpoint(Endpoint{AllowPlainTCP: true})); err == nil {
		t.Error("tcp:// without a port: accepted")
	}
	if _, err := New("http://192.0.2.1:80"); err == nil {
		t.Error("http://: accepted")
	}
}

func TestSSHSettings(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SSH_AUTH_SOCK", "")
	kh := filepath.Join(dir, "known_hosts")
	if _, err := New("ssh://bob@192.0.2.1", WithEndpoint(Endpoint{SSH: SSHConfig{KnownHostsFile: kh, IdentityFiles: []string{filepath.Join(dir, "id")}}})); err == nil || !strings.Contains(err.Error(), "known hosts") {
		t.Errorf("missing known_hosts: %v, want refused", err)
	}
	if err := os.WriteFile(kh, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New("ssh://bob@192.0.2.1", WithEndpoint(Endpoint{SSH: SSHConfig{KnownHostsFile: kh, IdentityFiles: []string{filepath.Join(dir, "id")}}})); err == nil || !strings.Contains(err.Error(), "identity file") {
		t.Errorf("missing identity file: %v, want refused", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "id"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New("ssh://bob@192.0.2.1", WithEndpoint(Endpoint{SSH: SSHConfig{KnownHostsFile: kh, IdentityFiles: []string{filepath.Join(dir, "id")}}})); err == nil || !strings.Contains(err.Error(), "ssh-agent") {
		t.Errorf("unparseable key: %v, want refused", err)
	}
}

// TestKnownKeyAlgorithms: the tunnel asks the server for the key types
// known_hosts holds for it, so a server that prefers another type is not
// refused as unknown.
func TestKnownKeyAlgorithms(t *testing.T) {
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(&ek.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize("192.0.2.1:2222")}, pub)
	if err := os.WriteFile(kh, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	if got := knownKeyAlgorithms(cb, "192.0.2.1:2222"); len(got) != 1 || got[0] != ssh.KeyAlgoECDSA256 {
		t.Errorf("algorithms for a host with an ECDSA key: %v", got)
	}
	if got := knownKeyAlgorithms(cb, "192.0.2.1:22"); got != nil {
		t.Errorf("algorithms for an unknown host: %v, want none (ssh's defaults)", got)
	}
}
