package dockerapi

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
	"k8s.io/klog/v2"
)

// DefaultRemoteSocket is the engine socket an ssh:// endpoint reaches when
// its URL names no path.
const DefaultRemoteSocket = "/var/run/docker.sock"

// SSHConfig is how an ssh:// endpoint authenticates the host and itself.
type SSHConfig struct {
	// KnownHostsFile holds the accepted host keys (default
	// ~/.ssh/known_hosts). A host whose key is not there is refused.
	KnownHostsFile string
	// InsecureIgnoreHostKey accepts any host key (tests, first contact).
	InsecureIgnoreHostKey bool
	// IdentityFiles are private keys to offer (default: those of
	// ~/.ssh/id_ed25519 and ~/.ssh/id_rsa that exist). The agent at
	// $SSH_AUTH_SOCK is asked too.
	IdentityFiles []string
}

// sshTunnel carries the Engine API over one SSH connection to the remote
// engine's unix socket (OpenSSH's direct-streamlocal channels: nothing but
// sshd and the engine on the remote host). The connection is made on the
// first dial and made again on the next dial after it broke, so an
// engine host that went away comes back without a restart.
type sshTunnel struct {
	addr   string // host:port
	socket string // engine socket on the remote host
	cfg    *ssh.ClientConfig
	// signers are the identity files' keys; the agent's are added at
	// each connection.
	signers []ssh.Signer

	mu     sync.Mutex
	client *ssh.Client
}

// sshKeepalive is how often an idle tunnel is probed, so that a dead TCP
// connection (host gone, cable cut) fails the streams riding on it within
// about twice this, rather than after the kernel's TCP timeout.
const sshKeepalive = 10 * time.Second

// parseSSHHost splits ssh://[user@]host[:port][/socket/path].
func parseSSHHost(host string) (usr, addr, socket string, err error) {
	u, err := url.Parse(host)
	if err != nil || u.Scheme != "ssh" || u.Hostname() == "" {
		return "", "", "", fmt.Errorf("docker host %q: want ssh://[user@]host[:port][/path/to/docker.sock]", host)
	}
	if _, set := u.User.Password(); set {
		return "", "", "", fmt.Errorf("docker host %q: passwords in the URL are not supported; use a key or the agent", host)
	}
	usr = u.User.Username()
	if usr == "" {
		cur, err := user.Current()
		if err != nil {
			return "", "", "", fmt.Errorf("docker host %q names no user and the current one is unknown: %w", host, err)
		}
		usr = cur.Username
	}
	port := u.Port()
	if port == "" {
		port = "22"
	}
	socket = u.Path
	if socket == "" || socket == "/" {
		socket = DefaultRemoteSocket
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", "", "", fmt.Errorf("docker host %q: query and fragment are not supported", host)
	}
	return usr, net.JoinHostPort(u.Hostname(), port), socket, nil
}

// newSSHTunnel checks the settings (known_hosts readable, keys parseable)
// without connecting: cri-compose starts while the host is away.
func newSSHTunnel(host string, sc SSHConfig) (*sshTunnel, error) {
	usr, addr, socket, err := parseSSHHost(host)
	if err != nil {
		return nil, err
	}
	home, _ := os.UserHomeDir()
	var hostKey ssh.HostKeyCallback
	var algos []string
	if sc.InsecureIgnoreHostKey {
		hostKey = ssh.InsecureIgnoreHostKey()
	} else {
		file := sc.KnownHostsFile
		if file == "" {
			file = filepath.Join(home, ".ssh", "known_hosts")
		}
		if hostKey, err = knownhosts.New(file); err != nil {
			return nil, fmt.Errorf("docker host %s: known hosts: %w (add the host's key, or allow any key with --ssh-insecure-ignore-host-key)", host, err)
		}
		algos = knownKeyAlgorithms(hostKey, addr)
	}
	files := sc.IdentityFiles
	explicit := len(files) > 0
	if !explicit {
		files = []string{filepath.Join(home, ".ssh", "id_ed25519"), filepath.Join(home, ".ssh", "id_rsa")}
	}
	var signers []ssh.Signer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			if !explicit && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("docker host %s: identity file: %w", host, err)
		}
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			// A passphrase-protected key is for the agent to hold.
			return nil, fmt.Errorf("docker host %s: identity file %s: %w (keys with a passphrase: load them into ssh-agent instead)", host, f, err)
		}
		signers = append(signers, s)
	}
	if len(signers) == 0 && os.Getenv("SSH_AUTH_SOCK") == "" {
		return nil, fmt.Errorf("docker host %s: no identity file (--ssh-identity-file, ~/.ssh/id_ed25519, ~/.ssh/id_rsa) and no agent ($SSH_AUTH_SOCK)", host)
	}
	cfg := &ssh.ClientConfig{
		User:              usr,
		HostKeyCallback:   hostKey,
		HostKeyAlgorithms: algos,
		Timeout:           15 * time.Second,
	}
	return &sshTunnel{addr: addr, socket: socket, cfg: cfg, signers: signers}, nil
}

// agentSigners are the agent's keys, asked at each connection (keys come
// and go); none if there is no agent. The signers sign through the
// returned connection: close it after the handshake.
func agentSigners() ([]ssh.Signer, io.Closer) {
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, io.NopCloser(nil)
	}
	conn, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		klog.V(2).InfoS("SSH agent unreachable", "socket", sock, "err", err)
		return nil, io.NopCloser(nil)
	}
	s, err := agent.NewClient(conn).Signers()
	if err != nil {
		klog.V(2).InfoS("SSH agent keys", "err", err)
		conn.Close()
		return nil, io.NopCloser(nil)
	}
	return s, conn
}

// knownKeyAlgorithms are the host key algorithms known_hosts holds for
// addr, so the server offers a key we can check (it may prefer another
// type, which we would then refuse as unknown). None: let ssh choose.
func knownKeyAlgorithms(cb ssh.HostKeyCallback, addr string) []string {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	probe, _ := ssh.NewSignerFromKey(priv)
	var ke *knownhosts.KeyError
	if err := cb(addr, &net.TCPAddr{IP: net.IPv4zero}, probe.PublicKey()); !errors.As(err, &ke) {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, k := range ke.Want {
		t := k.Key.Type()
		algs := []string{t}
		if t == ssh.KeyAlgoRSA {
			algs = []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
		}
		for _, a := range algs {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	return out
}

// DialContext opens a stream to the remote engine's socket, connecting
// (again) first if needed. Its errors reach callers as connection
// failures, that is Unavailable.
func (t *sshTunnel) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	c, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	conn, err := c.DialContext(ctx, "unix", t.socket)
	if err != nil {
		var oc *ssh.OpenChannelError
		if !errors.As(err, &oc) {
			// Not a refusal by sshd: the connection itself is broken.
			t.drop(c, err)
		}
		return nil, fmt.Errorf("engine socket %s on %s over ssh: %w", t.socket, t.addr, err)
	}
	return conn, nil
}

func (t *sshTunnel) connect(ctx context.Context) (*ssh.Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client != nil {
		return t.client, nil
	}
	d := net.Dialer{Timeout: t.cfg.Timeout, KeepAlive: 15 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", t.addr, err)
	}
	// The handshake honours ctx's deadline and the connect timeout.
	deadline := time.Now().Add(t.cfg.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	agentKeys, agentConn := agentSigners()
	defer agentConn.Close()
	cfg := *t.cfg
	cfg.Auth = []ssh.AuthMethod{ssh.PublicKeys(append(append([]ssh.Signer(nil), t.signers...), agentKeys...)...)}
	cc, chans, reqs, err := ssh.NewClientConn(conn, t.addr, &cfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("ssh %s: %w", t.addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	c := ssh.NewClient(cc, chans, reqs)
	t.client = c
	klog.InfoS("SSH tunnel to the engine up", "host", t.addr, "user", t.cfg.User, "socket", t.socket)
	go func() {
		err := c.Wait()
		t.drop(c, err)
	}()
	go t.keepalive(c)
	return c, nil
}

// drop forgets c (once) so that the next dial reconnects.
func (t *sshTunnel) drop(c *ssh.Client, why error) {
	t.mu.Lock()
	if t.client != c {
		t.mu.Unlock()
		return
	}
	t.client = nil
	t.mu.Unlock()
	c.Close()
	klog.InfoS("SSH tunnel to the engine down; the next call reconnects", "host", t.addr, "err", why)
}

// keepalive probes c until it closes; an unanswered probe closes it,
// which fails every stream on it (the event stream then resyncs).
func (t *sshTunnel) keepalive(c *ssh.Client) {
	tick := time.NewTicker(sshKeepalive)
	defer tick.Stop()
	for range tick.C {
		t.mu.Lock()
		current := t.client == c
		t.mu.Unlock()
		if !current {
			return
		}
		done := make(chan error, 1)
		go func() { _, _, err := c.SendRequest("keepalive@openssh.com", true, nil); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.drop(c, err)
				return
			}
		case <-time.After(sshKeepalive):
			t.drop(c, errors.New("keepalive unanswered"))
			return
		}
	}
}

// close ends the tunnel.
func (t *sshTunnel) close() {
	t.mu.Lock()
	c := t.client
	t.client = nil
	t.mu.Unlock()
	if c != nil {
		c.Close()
	}
}
