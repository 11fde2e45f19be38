// Package access tests who can reach cri-compose's CRI, with the built
// binary:
//
//   - TestSocketGroup: the unix socket is 0660, owned by --socket-group; a
//     user in that group gets answers, a user outside it is refused by the
//     kernel (root only: it makes a group and runs clients as nobody).
//   - TestTCPRefusedWithoutMutualTLS: --listen-tcp without a server
//     certificate, its key and a client CA does not start at all.
//   - TestTCPMutualTLS: over TCP, clients without a certificate, with one
//     from another CA, or speaking plain text are refused; a client whose
//     certificate the client CA signed is served.
//   - TestFilesClosed (files_test.go): with pods whose environment holds
//     secrets running, no file cri-compose writes (state dir, compose
//     files, image volume copies, CRI logs) can be read and no folder
//     listed by another user; a state dir left open by an older version is
//     closed at start with every pod kept; the socket group reads the
//     compose files and logs; no secret reaches the server's log at -v=10.
//
// Streaming URLs (single use, expiry) are tested in pkg/cri
// (TestStreamExec, TestStreamURLsSingleUse, TestStreamURLsExpire).
package access

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// helperEnv makes the test binary a CRI client: it calls Version on the
// unix socket named and exits 0 if it was answered, 1 if not.
const helperEnv = "CC_ACCESS_DIAL"

func TestMain(m *testing.M) {
	if sock := os.Getenv(helperEnv); sock != "" {
		os.Exit(dialHelper(sock))
	}
	if os.Getenv(readHelperEnv) != "" { // files_test.go
		os.Exit(readHelper(os.Stdin, os.Stdout))
	}
	os.Exit(suite.Main(m))
}

func dialHelper(sock string) int {
	conn, err := suite.Dial("unix://" + sock)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := runtime.NewRuntimeServiceClient(conn).Version(ctx, &runtime.VersionRequest{}); err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

func needEngine(t *testing.T) {
	t.Helper()
	eng := suite.NewEngine(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := eng.Ping(ctx); err != nil {
		images.SkipOrFail(t, "no Docker engine answers at %s: %v", eng.Host(), err)
	}
}

// TestSocketGroup checks the socket's mode and group, and that the kernel
// lets in exactly the group's members.
func TestSocketGroup(t *testing.T) {
	t.Parallel()
	group, gid := newGroup(t)
	needEngine(t)

	d := suite.NewDaemon(t, suite.DaemonConfig{Args: []string{"--socket-group", group}})
	// The folder must let others reach the socket: the socket's own mode
	// and group are what is under test.
	if err := os.Chmod(d.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d.Start()
	fi, err := os.Stat(d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 || int(st.Gid) != gid || st.Uid != 0 {
		t.Errorf("socket %v uid %d gid %d, want a socket 0660 root:%s (gid %d)", fi.Mode(), st.Uid, st.Gid, group, gid)
	}

	// Clients as nobody (65534), in the group and not.
	bin := helperCopy(t)
	dial := func(groups ...uint32) (bool, string) {
		cmd := exec.Command(bin)
		cmd.Env = []string{helperEnv + "=" + d.Sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
		out, err := cmd.CombinedOutput()
		return err == nil, strings.TrimSpace(string(out))
	}
	if ok, out := dial(uint32(gid)); !ok {
		t.Errorf("a member of %s was refused: %s", group, out)
	}
	if ok, out := dial(); ok {
		t.Errorf("a user outside %s was answered", group)
	} else if !strings.Contains(out, "permission denied") {
		t.Errorf("a user outside %s was refused, but not by the socket's mode: %s", group, out)
	}
}

// newGroup adds a group for the test (removed when it ends) and returns
// its name and gid; the test skips without root or groupadd, since it
// then runs clients as nobody (65534) in and out of the group.
func newGroup(t *testing.T) (string, int) {
	t.Helper()
	if os.Getuid() != 0 {
		images.SkipOrFail(t, "needs root: it adds a group and runs clients as another user")
	}
	if _, err := exec.LookPath("groupadd"); err != nil {
		images.SkipOrFail(t, "needs groupadd: %v", err)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	group := "ccsock-" + hex.EncodeToString(b)
	if out, err := exec.Command("groupadd", group).CombinedOutput(); err != nil {
		t.Fatalf("groupadd %s: %v %s", group, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("groupdel", group).Run() })
	g, err := user.LookupGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	return group, gid
}

// helperCopy copies the test binary where another user can run it.
func helperCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ccaccess-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// pki is a CA and the certificates a test needs, as PEM files.
type pki struct {
	dir                   string
	caCert                *x509.Certificate
	caKey                 *ecdsa.PrivateKey
	caFile                string
	caPool                *x509.CertPool
	serverCert, serverKey string
	clientCert, clientKey string
	clientPair            tls.Certificate // signed by the CA
	roguePair             tls.Certificate // a client certificate another CA signed
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	var caPEM []byte
	p.caCert, p.caKey, caPEM = makeCA(t, "cri-compose test CA")
	p.caFile = p.write(t, "ca.crt", caPEM)
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(p.caCert)
	crt, key := makeLeaf(t, p.caCert, p.caKey, "cri-compose", x509.ExtKeyUsageServerAuth)
	p.serverCert, p.serverKey = p.write(t, "server.crt", crt), p.write(t, "server.key", key)
	crt, key = makeLeaf(t, p.caCert, p.caKey, "kubelet", x509.ExtKeyUsageClientAuth)
	p.clientCert, p.clientKey = p.write(t, "client.crt", crt), p.write(t, "client.key", key)
	var err error
	if p.clientPair, err = tls.X509KeyPair(crt, key); err != nil {
		t.Fatal(err)
	}
	rogueCA, rogueKey, _ := makeCA(t, "another CA")
	crt, key = makeLeaf(t, rogueCA, rogueKey, "kubelet", x509.ExtKeyUsageClientAuth)
	if p.roguePair, err = tls.X509KeyPair(crt, key); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) write(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func serial(t *testing.T) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func makeCA(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func makeLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// TestTCPRefusedWithoutMutualTLS: --listen-tcp with any of the three TLS
// files missing is a start-up error, before any socket is served.
func TestTCPRefusedWithoutMutualTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	for name, args := range map[string][]string{
		"no TLS at all":       nil,
		"no client CA":        {"--tls-cert-file", p.serverCert, "--tls-private-key-file", p.serverKey},
		"no server key":       {"--tls-cert-file", p.serverCert, "--client-ca-file", p.caFile},
		"client CA not a PEM": {"--tls-cert-file", p.serverCert, "--tls-private-key-file", p.serverKey, "--client-ca-file", p.serverKey},
	} {
		d := suite.NewDaemon(t, suite.DaemonConfig{NoReady: true, Args: append([]string{"--listen-tcp", "127.0.0.1:0"}, args...)})
		err := d.StartErr()
		if err == nil {
			t.Errorf("%s: cri-compose started", name)
			continue
		}
		if !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "--listen-tcp") {
			t.Errorf("%s: %v, want an exit at start naming --listen-tcp", name, err)
		}
		if _, err := os.Stat(d.Sock); err == nil {
			t.Errorf("%s: the unix socket was created", name)
		}
	}
}

var tcpAddrRE = regexp.MustCompile(`"Serving CRI over TCP with mutual TLS" address="([^"]+)"`)

// TestTCPMutualTLS: only a client with a certificate from the client CA
// is served over TCP.
func TestTCPMutualTLS(t *testing.T) {
	t.Parallel()
	needEngine(t)
	p := newPKI(t)
	d := suite.NewDaemon(t, suite.DaemonConfig{Args: []string{"--listen-tcp", "127.0.0.1:0",
		"--tls-cert-file", p.serverCert, "--tls-private-key-file", p.serverKey, "--client-ca-file", p.caFile}})
	d.Start()
	m := tcpAddrRE.FindStringSubmatch(d.Log())
	if m == nil {
		t.Fatalf("no TCP address in the log:\n%s", d.LogTail(30))
	}
	addr := m[1]

	call := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rt := runtime.NewRuntimeServiceClient(conn)
		if _, err := rt.Version(ctx, &runtime.VersionRequest{}); err != nil {
			return err
		}
		_, err = rt.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{})
		return err
	}
	// The client presents its certificate whatever CAs the server names
	// (Go's client would otherwise withhold one the server cannot verify).
	tlsCreds := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: p.caPool, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if len(certs) == 0 {
					return &tls.Certificate{}, nil
				}
				return &certs[0], nil
			}})
	}
	if err := call(insecure.NewCredentials()); err == nil {
		t.Errorf("a plain-text client was served")
	}
	if err := call(tlsCreds()); err == nil {
		t.Errorf("a TLS client without a certificate was served")
	} else {
		t.Logf("no client certificate: %v", err)
	}
	if err := call(tlsCreds(p.roguePair)); err == nil {
		t.Errorf("a client whose certificate another CA signed was served")
	}
	if err := call(tlsCreds(p.clientPair)); err != nil {
		t.Errorf("a client with a certificate from the client CA: %v", err)
	}
	// The unix socket serves as before.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.RT.Version(ctx, &runtime.VersionRequest{}); err != nil {
		t.Errorf("unix socket: %v", err)
	}
}
