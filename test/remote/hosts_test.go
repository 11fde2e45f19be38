package remote

// The "remote" host on this machine: a private Docker engine in its own
// network namespace (test/privengine), reached through a real sshd on
// 127.0.0.1 and through its own TLS listener on a veth link.

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/privengine"
)

// tlsPort is the private engine's TLS listener, on its link address.
const tlsPort = 2376

// host is the private engine and the ways to reach it.
type host struct {
	pe *privengine.Engine

	// ssh://
	sshd      *sshd
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
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		images.SkipOrFail(t, "no sshd (apt-get install openssh-server): %v", err)
	}
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
	h.sshd = startSSHD(t, filepath.Join(dir, "ssh"))
	h.knownHost, h.identity = h.sshd.knownHosts, h.sshd.clientKey
	h.sshURL = fmt.Sprintf("ssh://root@127.0.0.1:%d%s", h.sshd.port, h.pe.Sock())
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

// sshd is Debian's OpenSSH server on 127.0.0.1 with its own config, host
// key and authorized key: nothing of the machine's ssh setup is used.
type sshd struct {
	t          testing.TB
	dir        string
	port       int
	knownHosts string // a known_hosts file with its host key
	clientKey  string // the private key it lets in
	cmd        *exec.Cmd
	exited     chan struct{}
}

func startSSHD(t testing.TB, dir string) *sshd {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Privilege separation needs this folder (the package's service makes
	// it; we do not run the service).
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	s := &sshd{t: t, dir: dir, port: freePort(t), knownHosts: filepath.Join(dir, "known_hosts"), clientKey: filepath.Join(dir, "id_ed25519")}
	hostPub := writeKey(t, filepath.Join(dir, "host_ed25519"))
	clientPub := writeKey(t, s.clientKey)
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o600); err != nil {
		t.Fatal(err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))}, hostPub)
	if err := os.WriteFile(s.knownHosts, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowStreamLocalForwarding yes
AllowTcpForwarding yes
ClientAliveInterval 5
LogLevel VERBOSE
`, s.port, filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "sshd.pid"), filepath.Join(dir, "authorized_keys"))
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	s.start()
	return s
}

// writeKey makes an ed25519 key, writes its private half (OpenSSH PEM)
// to path and returns the public half.
func writeKey(t testing.TB, path string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs sshd in the foreground (-D) and waits until it accepts
// connections.
func (s *sshd) start() {
	s.t.Helper()
	logf, err := os.OpenFile(filepath.Join(s.dir, "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(s.dir, "sshd_config"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("sshd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(s.dir, "sshd.log"))
			s.t.Fatalf("sshd exited at start: %v\n%s", cmd.ProcessState, b)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("sshd does not listen on %d after 20s", s.port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills sshd and its connections' processes (each in a session of
// its own, so found by parent pid), which drops every tunnel at once.
func (s *sshd) stop() {
	if s.cmd == nil {
		return
	}
	pids := append(descendants(s.cmd.Process.Pid), s.cmd.Process.Pid)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-s.exited
	s.cmd = nil
}

// descendants lists pid's children, recursively, from /proc.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so from the last ')'.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

func (s *sshd) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "sshd.log"))
	return string(b)
}
