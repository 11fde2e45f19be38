// Package sshhost runs Debian's OpenSSH server on 127.0.0.1 as the way in
// to a "remote" Docker host on this machine (test/privengine's engine):
// its own config, host key, known_hosts and client key. test/remote and
// test/vk (TestMultiHost) reach engines through it with ssh://.
package sshhost

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
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
	"github.com/cri-compose/cri-compose/test/suite"
)

// Server is Debian's OpenSSH server on 127.0.0.1 with its own config, host
// key and authorized key: nothing of the machine's ssh setup is used.
type Server struct {
	t          testing.TB
	Dir        string
	Port       int
	KnownHosts string // a known_hosts file with its host key
	ClientKey  string // the private key it lets in
	cmd        *exec.Cmd
	exited     chan struct{}
}

// New runs sshd with its files in dir, or skips t (fails under CI) where
// /usr/sbin/sshd is missing. It stops when t ends.
func New(t testing.TB, dir string) *Server {
	t.Helper()
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		images.SkipOrFail(t, "no sshd (apt-get install openssh-server): %v", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Privilege separation needs this folder (the package's service makes
	// it; we do not run the service).
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, Dir: dir, Port: freePort(t), KnownHosts: filepath.Join(dir, "known_hosts"), ClientKey: filepath.Join(dir, "id_ed25519")}
	hostPub := writeKey(t, filepath.Join(dir, "host_ed25519"))
	clientPub := writeKey(t, s.ClientKey)
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o600); err != nil {
		t.Fatal(err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)))}, hostPub)
	if err := os.WriteFile(s.KnownHosts, []byte(line+"\n"), 0o600); err != nil {
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
`, s.Port, filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "sshd.pid"), filepath.Join(dir, "authorized_keys"))
	if err := os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	s.Start()
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

// Start runs sshd in the foreground (-D) and waits until it accepts
// connections.
func (s *Server) Start() {
	s.t.Helper()
	logf, err := os.OpenFile(filepath.Join(s.Dir, "sshd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", filepath.Join(s.Dir, "sshd_config"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("sshd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	suite.Eventually(s.t, fmt.Sprintf("sshd to listen on %d", s.Port), 20*time.Second, func() (bool, string) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), time.Second)
		if err == nil {
			c.Close()
			return true, ""
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(s.Dir, "sshd.log"))
			s.t.Fatalf("sshd exited at start: %v\n%s", cmd.ProcessState, b)
		default:
		}
		return false, err.Error()
	})
}

// Stop kills sshd and its connections' processes (each in a session of
// its own, so found by parent pid), which drops every tunnel at once.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	pids := append(Descendants(s.cmd.Process.Pid), s.cmd.Process.Pid)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-s.exited
	s.cmd = nil
}

// Descendants lists pid's children, recursively, from /proc.
func Descendants(pid int) []int {
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

// Log is sshd's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "sshd.log"))
	return string(b)
}

// Pid is the listening sshd's pid (its connections' processes are its
// Descendants), 0 when stopped.
func (s *Server) Pid() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// URL is the ssh:// endpoint of the engine socket sock behind this sshd.
func (s *Server) URL(sock string) string {
	return fmt.Sprintf("ssh://root@127.0.0.1:%d%s", s.Port, sock)
}

// ClientArgs are cri-compose's flags to reach this sshd: its known_hosts
// and the key it lets in.
func (s *Server) ClientArgs() []string {
	return []string{"--ssh-known-hosts", s.KnownHosts, "--ssh-identity-file", s.ClientKey}
}
