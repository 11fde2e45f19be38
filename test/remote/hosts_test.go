package remote

// The "remote" host on this machine: a private Docker engine in its own
// network namespace (test/privengine), reached through a real sshd on
// 127.0.0.1 and through its own TLS listener on a veth link.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/test/privengine"
	"github.com/cri-compose/cri-compose/test/sshhost"
)

// tlsPort is the private engine's TLS listener, on its link address.
const tlsPort = 2376

// host is the private engine and the ways to reach it.
type host struct {
	pe *privengine.Engine

	// ssh://
	sshd      *sshhost.Server
	sshURL    string
	knownHost string // known_hosts with the sshd's key
	identity  string // the client's private key

	// tcp:// with TLS
	tlsURL    string
	clientDir string // ca.pem, cert.pem, key.pem of a good client
	rogueDir  string // a client certificate from another CA, with the right ca.pem
	otherCA   string // a folder whose ca.pem did not sign the server
}

// newHost starts the private engine (with a TLS listener) and an sshd
// that reaches its socket.
func newHost(t testing.TB) *host {
	t.Helper()
	dir := t.TempDir()
	h := &host{}
	srvDir := filepath.Join(dir, "tls-server")
	h.clientDir, h.rogueDir, h.otherCA = filepath.Join(dir, "tls-client"), filepath.Join(dir, "tls-rogue"), filepath.Join(dir, "tls-other-ca")
	for _, d := range []string{srvDir, h.clientDir, h.rogueDir, h.otherCA} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ca, caKey := newCA(t, "cri-compose test CA")
	rogue, rogueKey := newCA(t, "rogue CA")
	writePEM(t, filepath.Join(srvDir, "ca.pem"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(h.clientDir, "ca.pem"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(h.rogueDir, "ca.pem"), "CERTIFICATE", ca.Raw)
	writePEM(t, filepath.Join(h.otherCA, "ca.pem"), "CERTIFICATE", rogue.Raw)
	issue(t, h.clientDir, "client", ca, caKey, nil, x509.ExtKeyUsageClientAuth)
	issue(t, h.rogueDir, "client", rogue, rogueKey, nil, x509.ExtKeyUsageClientAuth)
	issue(t, h.otherCA, "client", ca, caKey, nil, x509.ExtKeyUsageClientAuth)

	h.pe = privengine.Start(t, privengine.Options{Link: true, Args: func(e *privengine.Engine) []string {
		// The server certificate names the link address (made with the
		// namespace, so known only now) and loopback.
		if _, err := os.Stat(filepath.Join(srvDir, "cert.pem")); err != nil {
			issue(t, srvDir, "engine", ca, caKey, []net.IP{net.ParseIP(e.LinkIP()), net.IPv4(127, 0, 0, 1)}, x509.ExtKeyUsageServerAuth)
		}
		return []string{"--host", fmt.Sprintf("tcp://%s:%d", e.LinkIP(), tlsPort), "--tlsverify",
			"--tlscacert", filepath.Join(srvDir, "ca.pem"), "--tlscert", filepath.Join(srvDir, "cert.pem"), "--tlskey", filepath.Join(srvDir, "key.pem")}
	}})
	h.tlsURL = fmt.Sprintf("tcp://%s:%d", h.pe.LinkIP(), tlsPort)
	h.sshd = sshhost.New(t, filepath.Join(dir, "ssh"))
	h.knownHost, h.identity = h.sshd.KnownHosts, h.sshd.ClientKey
	h.sshURL = h.sshd.URL(h.pe.Sock())
	return h
}

func newCA(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// issue writes dir/cert.pem and dir/key.pem, signed by ca.
func issue(t testing.TB, dir, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, ips []net.IP, usage x509.ExtKeyUsage) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "cert.pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(dir, "key.pem"), "EC PRIVATE KEY", kb)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
