package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer that nc's goroutines may write while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// runNC runs nc with stdin as its standard input (a terminal when tty).
func runNC(t *testing.T, stdin io.Reader, tty bool, args ...string) result {
	t.Helper()
	var stdout, stderr syncBuffer
	start := time.Now()
	code := run(args, stdio{in: stdin, inIsTTY: func() bool { return tty }, out: &stdout, err: &stderr})
	return result{code: code, stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
}

// withServices makes content the services database for the test.
func withServices(t *testing.T, content string) {
	path := filepath.Join(t.TempDir(), "services")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	old := servicesPath
	servicesPath = path
	t.Cleanup(func() { servicesPath = old })
}

// tcpServer serves each connection with handle and returns its port.
func tcpServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return port(l.Addr())
}

func port(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

// closedPort is a port of 127.0.0.1 where nothing listens.
func closedPort(t *testing.T, network string) string {
	t.Helper()
	var a net.Addr
	if network == "udp4" {
		c, err := net.ListenPacket(network, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a = c.LocalAddr()
		c.Close()
	} else {
		l, err := net.Listen(network, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		a = l.Addr()
		l.Close()
	}
	return port(a)
}

// hostName answers a "hostName" line with a name and closes the
// connection, as agnhost's netexec and serve-hostname do.
func hostName(c net.Conn) {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && strings.TrimSpace(line) == "hostName" {
		_, _ = c.Write([]byte("test-host"))
	}
}

func TestTCP(t *testing.T) {
	withServices(t, "")
	p := tcpServer(t, hostName)
	conns := make(chan string, 10)
	silent := tcpServer(t, func(c net.Conn) {
		b, _ := io.ReadAll(c) // until nc closes its end
		conns <- string(b)
	})
	closed := closedPort(t, "tcp4")

	// framework/service's testEndpointReachability: the answer on stdout.
	r := runNC(t, strings.NewReader("hostName\n"), false, "-v", "-t", "-w", "2", "127.0.0.1", p)
	if r.code != 0 || r.stdout != "test-host" || r.stderr != "Connection to 127.0.0.1 "+p+" port [tcp/*] succeeded!\n" {
		t.Errorf("nc -v -t: %+v", r)
	}
	r = runNC(t, strings.NewReader("hostName\n"), false, "-v", "-w", "2", "127.0.0.1", closed)
	if r.code != 1 || r.stdout != "" || r.stderr != "nc: connect to 127.0.0.1 port "+closed+" (tcp) failed: Connection refused\n" {
		t.Errorf("nc -v to a closed port: %+v", r)
	}

	// networking's checkConnectivityToHost: the exit status alone; -z
	// reports even without -v, and sends nothing.
	for _, args := range [][]string{{"-vz", "-w", "2"}, {"-vzw", "2"}, {"-zw2"}, {"-z"}} {
		r = runNC(t, strings.NewReader("not sent"), false, append(args, "127.0.0.1", silent)...)
		if r.code != 0 || r.stdout != "" || r.stderr != "Connection to 127.0.0.1 "+silent+" port [tcp/*] succeeded!\n" {
			t.Errorf("nc %q: %+v", args, r)
		}
		if got := <-conns; got != "" {
			t.Errorf("nc %q sent %q", args, got)
		}
		r = runNC(t, strings.NewReader(""), false, append(args, "127.0.0.1", closed)...)
		if r.code != 1 || r.stdout != "" {
			t.Errorf("nc %q to a closed port: %+v", args, r)
		}
		if want := "nc: connect to 127.0.0.1 port " + closed + " (tcp) failed: Connection refused\n"; strings.Contains(args[0], "v") != (r.stderr == want) {
			t.Errorf("nc %q to a closed port wrote %q", args, r.stderr)
		}
	}

	// A peer that neither answers nor closes: nc sends what it reads and
	// quits once -w passes with nothing more from either side; the
	// connection was made, so it succeeded.
	r = runNC(t, strings.NewReader("x\n"), false, "-w", "1", "127.0.0.1", silent)
	if r.code != 0 || r.stdout != "" || r.stderr != "" || r.took < 900*time.Millisecond || r.took > 4*time.Second {
		t.Errorf("nc -w 1 to a silent peer: %+v", r)
	}
	if got := <-conns; got != "x\n" {
		t.Errorf("the silent peer got %q", got)
	}
	// Without -w, the peer closing is the end (stdin has ended).
	quiet := tcpServer(t, func(net.Conn) {})
	r = runNC(t, strings.NewReader(""), false, "127.0.0.1", quiet)
	if r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("nc to a peer that closes: %+v", r)
	}

	// -N shuts the connection down for writing at stdin's end.
	echo := tcpServer(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		_, _ = c.Write(bytes.ToUpper(b))
	})
	r = runNC(t, strings.NewReader("hello\n"), false, "-N", "-w", "10", "127.0.0.1", echo)
	if r.code != 0 || r.stdout != "HELLO\n" || r.took > 5*time.Second {
		t.Errorf("nc -N: %+v", r)
	}
}

func TestServiceNames(t *testing.T) {
	p := tcpServer(t, hostName)
	withServices(t, "# name port/proto aliases\ne2e-test "+p+"/tcp e2e-alias # a comment\nother "+p+"/udp\n")
	r := runNC(t, strings.NewReader("hostName\n"), false, "-v", "-w", "2", "127.0.0.1", "e2e-alias")
	if r.code != 0 || r.stdout != "test-host" || r.stderr != "Connection to 127.0.0.1 "+p+" port [tcp/e2e-test] succeeded!\n" {
		t.Errorf("nc to a service: %+v", r)
	}
	// -n: no names.
	r = runNC(t, strings.NewReader(""), false, "-vzn", "127.0.0.1", p)
	if r.code != 0 || r.stderr != "Connection to 127.0.0.1 "+p+" port [tcp/*] succeeded!\n" {
		t.Errorf("nc -vzn: %+v", r)
	}
}

// TestTelnet: -t refuses the options the peer negotiates.
func TestTelnet(t *testing.T) {
	withServices(t, "")
	answers := make(chan []byte, 1)
	p := tcpServer(t, func(c net.Conn) {
		_, _ = c.Write([]byte{iac, do, 1, 'h', 'i', iac, will, 3})
		b := make([]byte, 6)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, _ := io.ReadFull(c, b)
		answers <- b[:k]
	})
	r := runNC(t, strings.NewReader(""), false, "-t", "-w", "5", "127.0.0.1", p)
	if r.code != 0 || r.stdout != string([]byte{iac, do, 1, 'h', 'i', iac, will, 3}) {
		t.Errorf("nc -t: %+v", r)
	}
	if got, want := <-answers, []byte{iac, wont, 1, iac, dont, 3}; !bytes.Equal(got, want) {
		t.Errorf("nc -t answered %v, want %v", got, want)
	}
}

// udpServer answers "hostName" datagrams with a name, as agnhost's
// netexec does, and passes on every datagram it gets with its source.
func udpServer(t *testing.T) (string, <-chan string) {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan string, 100)
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			select {
			case got <- fmt.Sprintf("%s from %s", buf[:k], port(from)):
			default:
			}
			if strings.TrimSpace(string(buf[:k])) == "hostName" {
				_, _ = c.WriteTo([]byte("test-host\n"), from)
			}
		}
	}()
	return port(c.LocalAddr()), got
}

func TestUDP(t *testing.T) {
	withServices(t, "")
	p, got := udpServer(t)
	closed := closedPort(t, "udp4")
	drain := func() (out []string) {
		for {
			select {
			case s := <-got:
				out = append(out, s)
			default:
				return out
			}
		}
	}

	// DialFromNode: the answer, nothing on stderr, and nc waits out -w.
	r := runNC(t, strings.NewReader("hostName\n"), false, "-w", "1", "-u", "127.0.0.1", p)
	if r.code != 0 || r.stdout != "test-host\n" || r.stderr != "" || r.took < 900*time.Millisecond || r.took > 4*time.Second {
		t.Errorf("nc -w 1 -u: %+v", r)
	}
	// testEndpointReachability's -v: netcat-openbsd reports UDP only when
	// it probes, which it does with -z or a terminal on stdin.
	r = runNC(t, strings.NewReader("hostName\n"), false, "-v", "-u", "-w", "1", "127.0.0.1", p)
	if r.code != 0 || r.stdout != "test-host\n" || r.stderr != "" {
		t.Errorf("nc -v -u: %+v", r)
	}
	drain()

	// conntrack's probe: -W 1 quits at the first answer, from -p's port.
	src := closedPort(t, "udp4")
	r = runNC(t, strings.NewReader("hostName\n"), false, "-w", "10", "-W", "1", "-u", "-p", src, "127.0.0.1", p)
	if r.code != 0 || r.stdout != "test-host\n" || r.took > 5*time.Second {
		t.Errorf("nc -W 1 -u -p: %+v", r)
	}
	if seen := drain(); len(seen) != 1 || seen[0] != "hostName\n from "+src {
		t.Errorf("the server got %q, want hostName from port %s", seen, src)
	}
	// A source port in use.
	held, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	r = runNC(t, strings.NewReader("hostName\n"), false, "-u", "-w", "1", "-p", port(held.LocalAddr()), "127.0.0.1", p)
	if r.code != 1 || r.stderr != "nc: bind failed: Address in use\n" {
		t.Errorf("nc -p with the port in use: %+v", r)
	}

	// -z probes with "X" datagrams for -w's seconds.
	r = runNC(t, strings.NewReader("not sent"), false, "-vzu", "-w", "1", "127.0.0.1", p)
	if r.code != 0 || r.stdout != "" || r.stderr != "Connection to 127.0.0.1 "+p+" port [udp/*] succeeded!\n" || r.took < 900*time.Millisecond {
		t.Errorf("nc -vzu: %+v", r)
	}
	for _, s := range drain() {
		if !strings.HasPrefix(s, "X from ") {
			t.Errorf("nc -vzu sent %q", s)
		}
	}
	r = runNC(t, strings.NewReader(""), false, "-zu", "-w", "1", "127.0.0.1", closed)
	if r.code != 1 || r.stdout != "" || r.stderr != "" {
		t.Errorf("nc -zu to a closed port: %+v", r)
	}
	// With a terminal on stdin, -v probes and reports too.
	r = runNC(t, strings.NewReader("hostName\n"), true, "-v", "-u", "-w", "1", "127.0.0.1", p)
	if r.code != 0 || r.stdout != "test-host\n" || r.stderr != "Connection to 127.0.0.1 "+p+" port [udp/*] succeeded!\n" {
		t.Errorf("nc -v -u from a terminal: %+v", r)
	}
	if seen := drain(); len(seen) < 3 || !strings.HasPrefix(seen[0], "X from ") || !strings.HasPrefix(seen[len(seen)-1], "hostName\n from ") {
		t.Errorf("nc -v -u from a terminal sent %q", seen)
	}

	// A closed port refuses the datagram: the ICMP error ends nc at once,
	// and as netcat-openbsd it still exits 0 (the socket was set up).
	r = runNC(t, strings.NewReader("hostName\n"), false, "-v", "-u", "-w", "10", "127.0.0.1", closed)
	if r.code != 0 || r.stdout != "" || r.stderr != "" || r.took > 5*time.Second {
		t.Errorf("nc -u to a closed port: %+v", r)
	}
}

func TestUsage(t *testing.T) {
	withServices(t, "")
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string // or its prefix, when it ends in "..."
	}{
		{nil, 1, "usage: nc ..."},
		{[]string{"-h"}, 0, "usage: nc ..."},
		{[]string{"-l", "8080"}, 1, "nc: unrecognized option: l\nusage: nc ..."},
		{[]string{"-w"}, 1, "nc: option requires an argument: w\nusage: nc ..."},
		{[]string{"-w", "abc", "127.0.0.1", "1"}, 1, "nc: timeout invalid: abc\n"},
		{[]string{"-W", "0", "127.0.0.1", "1"}, 1, "nc: receive limit too small: 0\n"},
		{[]string{"127.0.0.1"}, 1, "nc: missing port number\n"},
		{[]string{"-p", "1234", "127.0.0.1"}, 1, "usage: nc ..."},
		{[]string{"127.0.0.1", "70000"}, 1, "nc: port number too large: 70000\n"},
		{[]string{"127.0.0.1", "nosuch"}, 1, "nc: service \"nosuch\" unknown\n"},
		// Options end at the first operand, as with musl's getopt.
		{[]string{"127.0.0.1", "1", "-w", "1"}, 1, "nc: service \"-w\" unknown\n"},
		{[]string{"-n", "localhost", "80"}, 1, "nc: getaddrinfo for host \"localhost\" port 80: Name does not resolve\n"},
		{[]string{"-4", "::1", "80"}, 1, "nc: getaddrinfo for host \"::1\" port 80: Name does not resolve\n"},
	} {
		r := runNC(t, strings.NewReader(""), false, tc.args...)
		ok := r.stderr == tc.stderr
		if p, cut := strings.CutSuffix(tc.stderr, "..."); cut {
			ok = strings.HasPrefix(r.stderr, p)
		}
		if r.code != tc.code || !ok || r.stdout != "" {
			t.Errorf("nc %q: exit %d, stderr %q; want %d, %q", tc.args, r.code, r.stderr, tc.code, tc.stderr)
		}
	}
}

func TestPorts(t *testing.T) {
	withServices(t, "http 80/tcp www\n")
	got, err := ports([]string{"http", "90-88", "7"}, "tcp")
	if want := []int{80, 88, 89, 90, 7}; err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ports: %v, %v; want %v", got, err, want)
	}
	if _, err := ports([]string{"http"}, "udp"); err == nil {
		t.Error("http/udp is not in the database")
	}
	if n, bad := strtonum(strconv.Itoa(1<<31), 0, 1<<31-1); bad != "too large" {
		t.Errorf("strtonum: %d, %q", n, bad)
	}
}
