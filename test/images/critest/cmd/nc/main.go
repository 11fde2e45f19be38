// Command nc is the client side of OpenBSD netcat as Alpine ships it
// (netcat-openbsd 1.226 with Debian's patches), for the Kubernetes e2e
// agnhost image (test/images/kubee2e): upstream agnhost is Alpine with
// netcat-openbsd, and the e2e suite runs `nc -v -t -w 2`, `nc -vz -w N`,
// `nc -u -w N` and `nc -w N -W 1 -u -p PORT` there. Busybox's nc applet
// rejects -t, -W and -z with -u. It only connects: there is no listen mode
// (-l), no UNIX sockets (-U) and no proxy (-x).
//
// Usage: nc [-46dhNntuvz] [-p source_port] [-W recvlimit] [-w timeout]
// destination port ...
//
// As netcat-openbsd, it connects over TCP (UDP with -u) to each port in
// turn (a port is a number, a lo-hi range or a name in /etc/services),
// trying each address of destination until one connects. Then it copies
// standard input to the connection (with -u, each read of it is one
// datagram) and what it receives to standard output, until both directions
// are done: standard input ends (and with -N the TCP connection is shut
// down for writing) and the peer closes the connection, or an error on
// the socket (a reset, or with -u the ICMP port unreachable a datagram
// brought back) ends both. Options are taken only before the first operand
// (musl's getopt does not reorder arguments).
//
//   - -w SECS is both the connect timeout and the idle timeout: nc quits
//     when SECS pass with nothing read from standard input or the peer. A
//     UDP peer never closes, so with -u nc always waits that long after the
//     last datagram, unless -W is reached first. Without -w there is none.
//   - -W N quits once N reads from the connection (with -u, N datagrams)
//     were copied to standard output.
//   - -z connects and sends nothing. With -u (or with -v and -u when
//     standard input is a terminal) it writes "X" datagrams for SECS
//     seconds (3 without -w), and fails when they are refused.
//   - -v reports to standard error "Connection to HOST (IP) PORT port
//     [tcp/SERVICE] succeeded!" (SERVICE is * when /etc/services has no
//     name for it; the IP is left out when HOST is that IP or with -n), and
//     each failed connect "nc: connect to HOST port PORT (tcp) failed:
//     Connection refused". -z reports success even without -v. With -u the
//     report needs -z or a terminal, as the "X" probe does.
//   - -t answers TELNET option negotiation (WILL/WONT with DONT, DO/DONT
//     with WONT), as netcat-openbsd's -t does; TCP is the default anyway.
//   - -p PORT binds the local end to PORT; -n takes destination as a
//     numeric address and looks up no service names; -4 and -6 use only
//     that address family; -d does not read standard input.
//
// The exit status is 0 once a connection was made (even when the peer then
// sends nothing or refuses datagrams), and 1 when none was, a -z/-v UDP
// probe was refused, the destination does not resolve, -p's port cannot be
// bound or the arguments are wrong. Error messages are netcat-openbsd's,
// with musl's strerror texts.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

const (
	bufSize = 16384 // netcat-openbsd's BUFSIZE: the most one read takes
	// udpScanTimeout is how long, in seconds, the UDP probe of -z lasts
	// without -w.
	udpScanTimeout = 3
	usage          = "usage: nc [-46dhNntuvz] [-p source_port] [-W recvlimit] [-w timeout]\n\t  destination port ...\n"
)

// servicesPath is the services database that names ports.
var servicesPath = "/etc/services"

type options struct {
	family    string // "ip", "ip4" (-4) or "ip6" (-6)
	detach    bool   // -d
	shutdown  bool   // -N
	numeric   bool   // -n
	srcPort   string // -p
	telnet    bool   // -t
	udp       bool   // -u
	verbose   bool   // -v
	zero      bool   // -z
	recvLimit int    // -W; 0 is none
	timeout   int    // -w, in seconds; -1 is none
	operands  []string
}

// stdio is what nc reads and writes besides the network.
type stdio struct {
	in       io.Reader
	inIsTTY  func() bool
	out, err io.Writer
}

// exitError ends run with an exit status after a message, when msg is set.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// fatal is errx(3): "nc: MSG", exit status 1.
func fatal(format string, args ...any) error {
	return &exitError{code: 1, msg: "nc: " + fmt.Sprintf(format, args...) + "\n"}
}

func usageError(msg string) error {
	if msg != "" {
		msg = "nc: " + msg + "\n"
	}
	return &exitError{code: 1, msg: msg + usage}
}

// strtonum is OpenBSD's: a decimal number within [lo, hi], or the reason
// it is not ("invalid", "too small", "too large").
func strtonum(s string, lo, hi int64) (int64, string) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && n < 0, err == nil && n < lo:
		return 0, "too small"
	case errors.Is(err, strconv.ErrRange), err == nil && n > hi:
		return 0, "too large"
	case err != nil:
		return 0, "invalid"
	}
	return n, ""
}

// parse reads the options as getopt(3) with "46dhNnp:tuvW:w:z" does.
func parse(args []string) (options, error) {
	o := options{family: "ip", timeout: -1}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			value := func() (string, error) {
				if j+1 < len(a) {
					v := a[j+1:]
					j = len(a)
					return v, nil
				}
				if i+1 < len(args) {
					i++
					return args[i], nil
				}
				return "", usageError(fmt.Sprintf("option requires an argument: %c", c))
			}
			switch c {
			case '4':
				o.family = "ip4"
			case '6':
				o.family = "ip6"
			case 'd':
				o.detach = true
			case 'h':
				return o, &exitError{code: 0, msg: usage}
			case 'N':
				o.shutdown = true
			case 'n':
				o.numeric = true
			case 't':
				o.telnet = true
			case 'u':
				o.udp = true
			case 'v':
				o.verbose = true
			case 'z':
				o.zero = true
			case 'p':
				v, err := value()
				if err != nil {
					return o, err
				}
				o.srcPort = v
			case 'W':
				v, err := value()
				if err != nil {
					return o, err
				}
				n, bad := strtonum(v, 1, math.MaxInt32)
				if bad != "" {
					return o, fatal("receive limit %s: %s", bad, v)
				}
				o.recvLimit = int(n)
			case 'w':
				v, err := value()
				if err != nil {
					return o, err
				}
				n, bad := strtonum(v, 0, math.MaxInt32/1000)
				if bad != "" {
					return o, fatal("timeout %s: %s", bad, v)
				}
				o.timeout = int(n)
			default:
				return o, usageError(fmt.Sprintf("unrecognized option: %c", c))
			}
		}
	}
	o.operands = args[i:]
	switch {
	case len(o.operands) == 0, len(o.operands) == 1 && o.srcPort != "":
		return o, usageError("")
	case len(o.operands) == 1:
		return o, fatal("missing port number")
	}
	return o, nil
}

func (o options) proto() string {
	if o.udp {
		return "udp"
	}
	return "tcp"
}

// service is one line of /etc/services.
type service struct {
	name, proto string
	port        int
}

func services() []service {
	f, err := os.Open(servicesPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []service
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		p, proto, ok := strings.Cut(fields[1], "/")
		port, err := strconv.Atoi(p)
		if !ok || err != nil {
			continue
		}
		for _, name := range append([]string{fields[0]}, fields[2:]...) {
			out = append(out, service{name: name, proto: proto, port: port})
		}
	}
	return out
}

// serviceByName is getservbyname(3).
func serviceByName(name, proto string) (int, bool) {
	for _, s := range services() {
		if s.name == name && s.proto == proto {
			return s.port, true
		}
	}
	return 0, false
}

// serviceName is getservbyport(3), or "*".
func serviceName(port int, proto string) string {
	for _, s := range services() {
		if s.port == port && s.proto == proto {
			return s.name
		}
	}
	return "*"
}

// strtoport is netcat's: a port number, or a service's.
func strtoport(s, proto string) (int, error) {
	n, bad := strtonum(s, 1, 65535)
	switch {
	case bad == "":
		return int(n), nil
	case bad != "invalid":
		return 0, fatal("port number %s: %s", bad, s)
	}
	if p, ok := serviceByName(s, proto); ok {
		return p, nil
	}
	return 0, fatal("service \"%s\" unknown", s)
}

// ports is netcat's build_ports: names, numbers and lo-hi ranges.
func ports(args []string, proto string) ([]int, error) {
	var out []int
	for _, a := range args {
		if p, ok := serviceByName(a, proto); ok {
			out = append(out, p)
			continue
		}
		if lo, hi, ok := strings.Cut(a, "-"); ok && a[0] >= '0' && a[0] <= '9' {
			h, err := strtoport(hi, proto)
			if err != nil {
				return nil, err
			}
			l, err := strtoport(lo, proto)
			if err != nil {
				return nil, err
			}
			l, h = min(l, h), max(l, h)
			for p := l; p <= h; p++ {
				out = append(out, p)
			}
			continue
		}
		p, err := strtoport(a, proto)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// strerror is musl's text for the errors a client meets.
func strerror(err error) string {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	switch errno {
	case syscall.ECONNREFUSED:
		return "Connection refused"
	case syscall.ETIMEDOUT:
		return "Operation timed out"
	case syscall.EINPROGRESS:
		return "Operation in progress"
	case syscall.EHOSTUNREACH:
		return "Host is unreachable"
	case syscall.ENETUNREACH:
		return "Network unreachable"
	case syscall.EHOSTDOWN:
		return "Host is down"
	case syscall.ENETDOWN:
		return "Network is down"
	case syscall.EADDRINUSE:
		return "Address in use"
	case syscall.EADDRNOTAVAIL:
		return "Address not available"
	case syscall.ECONNRESET:
		return "Connection reset by peer"
	case syscall.ECONNABORTED:
		return "Connection aborted"
	case syscall.EACCES:
		return "Permission denied"
	case syscall.EPERM:
		return "Operation not permitted"
	case syscall.EPIPE:
		return "Broken pipe"
	case syscall.EINVAL:
		return "Invalid argument"
	case syscall.EAFNOSUPPORT:
		return "Address family not supported by protocol"
	}
	s := errno.Error()
	return strings.ToUpper(s[:1]) + s[1:]
}

// nc is one run: its options and standard streams.
type nc struct {
	o   options
	sio stdio
	// stdin carries the reads of standard input; it is closed at its end.
	// It is started by the first connection that copies it, and later
	// ones (one per port) go on from where that one stopped.
	stdin chan []byte
}

func run(args []string, sio stdio) int {
	o, err := parse(args)
	if err == nil {
		n := &nc{o: o, sio: sio}
		var code int
		code, err = n.main()
		if err == nil {
			return code
		}
	}
	var e *exitError
	if errors.As(err, &e) {
		fmt.Fprint(sio.err, e.msg)
		return e.code
	}
	fmt.Fprintf(sio.err, "nc: %v\n", err)
	return 1
}

// main is netcat's client loop over the ports.
func (n *nc) main() (int, error) {
	host := n.o.operands[0]
	ps, err := ports(n.o.operands[1:], n.o.proto())
	if err != nil {
		return 1, err
	}
	ret := 1
	for _, port := range ps {
		conn, ip, err := n.connect(host, port)
		if err != nil {
			return 1, err
		}
		if conn == nil {
			continue
		}
		ret = 0
		if n.o.verbose || n.o.zero {
			report := true
			if n.o.udp {
				probed, ok := n.udpProbe(conn)
				if !ok {
					ret = 1
					conn.Close()
					continue
				}
				report = probed
			}
			if report {
				n.connectionInfo(host, ip, port)
			}
		}
		if !n.o.zero {
			n.readwrite(conn)
		}
		conn.Close()
	}
	return ret, nil
}

// resolve is getaddrinfo(3) for the destination.
func (n *nc) resolve(host string, port int) ([]netip.Addr, error) {
	fail := func(reason string) error {
		return fatal("getaddrinfo for host \"%s\" port %d: %s", host, port, reason)
	}
	fits := func(a netip.Addr) bool {
		return n.o.family == "ip" || (n.o.family == "ip4") == a.Is4()
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a = a.Unmap(); !fits(a) {
			return nil, fail("Name does not resolve")
		}
		return []netip.Addr{a}, nil
	}
	if n.o.numeric {
		return nil, fail("Name does not resolve")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, n.o.family, host)
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return nil, fail("Name does not resolve")
	case err != nil:
		return nil, fail("Try again")
	}
	var out []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); fits(a) {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fail("Name does not resolve")
	}
	return out, nil
}

// connect is netcat's remote_connect: the first address of host that
// connects, with the failures of the others reported under -v. It returns
// no connection when none connected, and an error when nc must stop.
func (n *nc) connect(host string, port int) (net.Conn, string, error) {
	addrs, err := n.resolve(host, port)
	if err != nil {
		return nil, "", err
	}
	var local int
	if n.o.srcPort != "" {
		p, bad := strtonum(n.o.srcPort, 0, 65535)
		local = int(p)
		if bad != "" {
			var ok bool
			if local, ok = serviceByName(n.o.srcPort, n.o.proto()); !ok {
				return nil, "", fatal("getaddrinfo: Unrecognized service")
			}
		}
	}
	for _, a := range addrs {
		network := n.o.proto() + "4"
		unspecified := netip.IPv4Unspecified()
		if a.Is6() {
			network, unspecified = n.o.proto()+"6", netip.IPv6Unspecified()
		}
		d := net.Dialer{}
		if n.o.timeout > 0 {
			d.Timeout = time.Duration(n.o.timeout) * time.Second
		}
		if n.o.srcPort != "" {
			ap := netip.AddrPortFrom(unspecified, uint16(local))
			if n.o.udp {
				d.LocalAddr = net.UDPAddrFromAddrPort(ap)
			} else {
				d.LocalAddr = net.TCPAddrFromAddrPort(ap)
			}
		}
		conn, err := d.Dial(network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return conn, a.String(), nil
		}
		var sysErr *os.SyscallError
		if errors.As(err, &sysErr) && sysErr.Syscall == "bind" {
			return nil, "", fatal("bind failed: %s", strerror(sysErr.Err))
		}
		if n.o.verbose {
			// A connect that -w cut short failed with EINPROGRESS.
			how, why := "failed", strerror(err)
			var errno syscall.Errno
			var netErr net.Error
			if !errors.As(err, &errno) && errors.As(err, &netErr) && netErr.Timeout() {
				how, why = "timed out", strerror(syscall.EINPROGRESS)
			}
			dst := host
			if !n.o.numeric && host != a.String() {
				dst = fmt.Sprintf("%s (%s)", host, a)
			}
			fmt.Fprintf(n.sio.err, "nc: connect to %s port %d (%s) %s: %s\n", dst, port, n.o.proto(), how, why)
		}
	}
	return nil, "", nil
}

// connectionInfo reports a connection that succeeded.
func (n *nc) connectionInfo(host, ip string, port int) {
	svc := "*"
	if !n.o.numeric {
		svc = serviceName(port, n.o.proto())
	}
	dst := host
	if !n.o.numeric && host != ip {
		dst = fmt.Sprintf("%s (%s)", host, ip)
	}
	fmt.Fprintf(n.sio.err, "Connection to %s %d port [%s/%s] succeeded!\n", dst, port, n.o.proto(), svc)
}

// udpProbe is netcat's udptest: with -z, or when standard input is a
// terminal, it writes "X" datagrams for the timeout's seconds; probed says
// whether it did, ok false that they were refused.
func (n *nc) udpProbe(conn net.Conn) (probed, ok bool) {
	if !n.o.zero && !n.sio.inIsTTY() {
		return false, true
	}
	x := []byte("X")
	refused := func(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
	if _, err := conn.Write(x); err != nil {
		return false, false
	}
	if _, err := conn.Write(x); err != nil && refused(err) {
		return false, false
	}
	secs := udpScanTimeout
	if n.o.timeout >= 0 {
		secs = n.o.timeout
	}
	for range secs {
		time.Sleep(time.Second)
		if _, err := conn.Write(x); err != nil && refused(err) {
			return false, false
		}
	}
	return true, true
}

// The events of readwrite's two directions.
type event int

const (
	stdinData  event = iota // read from standard input, being sent
	stdinEnd                // standard input ended
	sendFailed              // a write to the connection failed
	netData                 // received and copied to standard output
	netEnd                  // the peer closed the connection
	stdoutGone              // standard output failed
	netError                // the socket failed: both directions end
	limitHit                // -W's count was received: both directions end
)

// stdinReads starts reading standard input, once.
func (n *nc) stdinReads() <-chan []byte {
	if n.stdin == nil {
		ch := make(chan []byte)
		go func() {
			defer close(ch)
			for {
				buf := make([]byte, bufSize)
				k, err := n.sio.in.Read(buf)
				if k > 0 {
					ch <- buf[:k]
				}
				if err != nil {
					return
				}
			}
		}()
		n.stdin = ch
	}
	return n.stdin
}

// readwrite is netcat's: it copies standard input to conn and conn to
// standard output until both directions are done or the -w idle timeout
// passes.
func (n *nc) readwrite(conn net.Conn) {
	done := make(chan struct{})
	defer close(done)
	events := make(chan event)
	send := func(e event) bool {
		select {
		case events <- e:
			return true
		case <-done:
			return false
		}
	}

	sending := !n.o.detach
	if sending {
		in := n.stdinReads()
		go func() {
			for {
				var b []byte
				var ok bool
				select {
				case b, ok = <-in:
				case <-done:
					return
				}
				if !ok {
					send(stdinEnd)
					return
				}
				if !send(stdinData) {
					return
				}
				if _, err := conn.Write(b); err != nil {
					send(sendFailed)
					return
				}
			}
		}()
	}
	receiving := true
	go func() {
		buf := make([]byte, bufSize)
		for count := 1; ; count++ {
			k, err := conn.Read(buf)
			if k == 0 && err == nil {
				err = io.EOF // read(2) of an empty datagram
			}
			if k > 0 {
				if n.o.telnet {
					n.answerTelnet(conn, buf[:k])
				}
				if _, werr := n.sio.out.Write(buf[:k]); werr != nil {
					send(stdoutGone)
					return
				}
			}
			switch {
			case n.o.recvLimit > 0 && count >= n.o.recvLimit:
				send(limitHit)
				return
			case errors.Is(err, io.EOF):
				send(netEnd)
				return
			case err != nil:
				send(netError)
				return
			}
			if !send(netData) {
				return
			}
		}
	}()

	var idle <-chan time.Time
	var timer *time.Timer
	if n.o.timeout >= 0 {
		timer = time.NewTimer(time.Duration(n.o.timeout) * time.Second)
		defer timer.Stop()
		idle = timer.C
	}
	for sending || receiving {
		select {
		case <-idle:
			return
		case e := <-events:
			if timer != nil {
				timer.Reset(time.Duration(n.o.timeout) * time.Second)
			}
			switch e {
			case stdinEnd:
				sending = false
				if tcp, ok := conn.(*net.TCPConn); ok && n.o.shutdown {
					_ = tcp.CloseWrite()
				}
			case sendFailed:
				sending = false
			case netEnd, stdoutGone:
				receiving = false
			case netError, limitHit:
				sending, receiving = false, false
			}
		}
	}
}

// TELNET's commands.
const (
	iac  = 255
	dont = 254
	do   = 253
	wont = 252
	will = 251
)

// answerTelnet refuses the options the peer offers or asks for in b, as
// netcat's atelnet does.
func (n *nc) answerTelnet(conn net.Conn, b []byte) {
	for p := 0; p < len(b)-2; p++ {
		if b[p] != iac {
			continue
		}
		p++
		var verb byte
		switch b[p] {
		case will, wont:
			verb = dont
		case do, dont:
			verb = wont
		default:
			continue
		}
		p++
		if _, err := conn.Write([]byte{iac, verb, b[p]}); err != nil {
			fmt.Fprintf(n.sio.err, "nc: Write Error!: %s\n", strerror(err))
		}
	}
}

// stdinIsTTY is isatty(0).
func stdinIsTTY() bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

func main() {
	// As netcat: a closed standard output is an error to handle, not a
	// signal that kills.
	signal.Ignore(syscall.SIGPIPE)
	os.Exit(run(os.Args[1:], stdio{in: os.Stdin, inIsTTY: stdinIsTTY, out: os.Stdout, err: os.Stderr}))
}
