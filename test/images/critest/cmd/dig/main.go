// Command dig is BIND 9.18's dig for the forms the Kubernetes e2e suite
// runs, for its images (test/images/kubee2e): upstream agnhost is Alpine
// with bind-tools and glibc-dns-testing is Debian with dnsutils, and the
// [sig-network] DNS specs run there:
//
//	dig +notcp +noall +answer +search NAME [A|AAAA|SRV|PTR]
//	dig +tcp +noall +answer +search NAME [A|AAAA|SRV|PTR]
//	dig +short [+search] NAME [CNAME|A|AAAA]
//	dig +short @SERVER [-p PORT] NAME, dig +short -x ADDRESS
//
// Usage: dig [@server] [-46hv] [-c class] [-p port] [-q name] [-t type]
// [-x addr] [name] [type] [class] [+[no]option ...]
//
// Each name (or -q NAME, or -x ADDRESS, which asks the PTR of the address's
// in-addr.arpa or ip6.arpa name) is one lookup; a type or class word
// before the first name is the default of every lookup, after one it is
// that lookup's. Without a name dig asks the root's NS. The servers are
// the @SERVER arguments (addresses, or names looked up through the system
// resolver), or else resolv.conf's nameservers (127.0.0.1 and ::1 when it
// has none), at port 53 or -p's.
//
// A lookup asks the first server over UDP (TCP with +tcp or +vc), up to
// +tries times in all (3, or resolv.conf's attempts) while no reply
// comes within +time seconds (5 over UDP and 10 over TCP, or resolv.conf's
// timeout), then the next server; a refused connection moves on at once.
// Each failed try prints ";; communications error to SERVER#PORT: REASON"
// and a lookup that got no reply ";; no servers could be reached", both on
// standard output as dig does. A truncated UDP reply is asked again over
// TCP (not with +ignore); a SERVFAIL is the answer unless +nofail, which
// moves on to the next server. Queries set RD (not with +norecurse) and
// carry EDNS (UDP size 1232 or +bufsize, DO with +dnssec; none with
// +noedns).
//
// With +search (or +domain=DOMAIN, whose one domain is then the search
// list), a relative name with fewer dots than ndots (resolv.conf's
// options ndots, 1 without it, or +ndots) is tried in each domain of
// resolv.conf's search list in turn and then as it is, moving on only
// when the reply is NXDOMAIN; a name with as many dots or more is tried
// only as it is, as BIND's dig does. Without +search a name is absolute.
// The last reply is printed (each one with +showsearch).
//
// Output is dig's: the header and sections, with records in dig's columns
// ("name TTL IN TYPE rdata", tabs to columns 24, 32, 40 and 48 of width 8,
// a space where a field is past its column); +[no]cmd, +[no]comments,
// +[no]question, +[no]answer, +[no]authority, +[no]additional, +[no]stats
// and +[no]all choose the parts, +[no]ttlid and +[no]class the fields, and
// +short prints only the answer records' data, one a line (a CNAME's
// target, then the addresses). Records print as BIND prints A, AAAA,
// CNAME, NS, PTR, MX, SRV, TXT and SOA; other types as RFC 3597's
// "\# LENGTH HEX".
//
// The exit status is 0 once every lookup got a reply (an NXDOMAIN or
// SERVFAIL too), 9 when one got none, 1 on a usage error, and 10 when a
// server name does not resolve or an -x address is not one. Zone
// transfers, +trace, +nssearch, TSIG (-k, -y), batch files (-f) and -b are
// not supported; dig's options that change only what is sent or printed
// in ways the specs do not read (+cookie, +nsid, +multiline, ...) are
// accepted and ignored.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cri-compose/cri-compose/test/images/critest/internal/dnsstub"
)

// version is the dig whose output this one follows.
const version = "9.18-critest"

const usage = `Usage:  dig [@global-server] [domain] [q-type] [q-class] {q-opt}
            {global-d-opt} host [@local-server] {local-d-opt}
            [ host [@local-server] {local-d-opt} [...]]

Use "dig -h" (or "dig -h | more") for complete list of options
`

const help = `Usage:  dig [@server] [-46hv] [-c class] [-p port] [-q name] [-t type] [-x addr]
            [name] [type] [class] [+[no]option ...]
d-opt is of the form +keyword[=value], where keyword is:
                 +[no]all            (Set or clear all display flags)
                 +[no]additional     (Control display of additional section)
                 +[no]aaflag         (Set AA flag in query (+[no]aaflag))
                 +[no]adflag         (Set AD flag in query)
                 +[no]answer         (Control display of answer section)
                 +[no]authority      (Control display of authority section)
                 +bufsize[=###]      (Set EDNS0 Max UDP packet size)
                 +[no]cdflag         (Set checking disabled flag in query)
                 +[no]class          (Control display of class in records)
                 +[no]cmd            (Control display of command line)
                 +[no]comments       (Control display of packet header and section name comments)
                 +[no]dnssec         (Request DNSSEC records)
                 +domain=###         (Set default domainname)
                 +[no]edns[=###]     (Set EDNS version) [0]
                 +[no]fail           (Don't try next server on SERVFAIL)
                 +[no]ignore         (Don't revert to TCP for TC responses.)
                 +ndots=###          (Set search NDOTS value)
                 +[no]question       (Control display of question section)
                 +[no]recurse        (Recursive mode)
                 +retry=###          (Set number of UDP retries) [2]
                 +[no]search         (Set whether to use searchlist)
                 +[no]short          (Display nothing except short form of answers)
                 +[no]showsearch     (Search with intermediate results)
                 +[no]stats          (Control display of statistics)
                 +[no]tcp            (TCP mode (+[no]vc))
                 +time=###           (Set query timeout) [5]
                 +tries=###          (Set number of UDP attempts) [3]
                 +[no]ttlid          (Control display of ttls in records)
`

// resolvConfPath is the resolv.conf dig reads; port is the nameservers'
// port without -p. Tests change them.
var (
	resolvConfPath        = "/etc/resolv.conf"
	port           uint16 = 53
)

// display is what dig prints of a reply.
type display struct {
	cmd, comments, question, answer, authority, additional, stats bool
	short                                                         bool
	ttl, class                                                    bool
}

// lookup is one name to ask.
type lookup struct {
	name     string
	qtype    dnsmessage.Type
	class    dnsmessage.Class
	absolute bool // -x's reverse name, never searched
}

type options struct {
	servers         []string // @server, in order
	port            uint16
	tcp             bool
	search          bool
	showSearch      bool
	domain          string // +domain=, the search list when set
	ndots           int    // -1: resolv.conf's
	timeout         time.Duration
	tries           int // 0: resolv.conf's attempts, or 3
	recurse         bool
	aa, ad, cd      bool
	edns, dnssec    bool
	bufsize         int
	ignoreTC        bool
	servfailStops   bool
	network         string // "ip", "ip4" (-4) or "ip6" (-6)
	disp            display
	lookups         []lookup
	defType         dnsmessage.Type
	defTypeSet      bool
	defClass        dnsmessage.Class
	versionOrHelpTo io.Writer // -v or -h: print this and exit 0
	versionOrHelp   string
}

// exitError ends run with status code after msg (to standard error).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &exitError{code: 1, msg: fmt.Sprintf(format, args...) + "\n" + usage}
}

func fatal(format string, args ...any) error {
	return &exitError{code: 10, msg: "dig: " + fmt.Sprintf(format, args...) + "\n"}
}

// parse reads dig's arguments.
func parse(args []string, stdout, stderr io.Writer) (options, error) {
	o := options{
		port: port, ndots: -1, recurse: true, edns: true, bufsize: 1232, servfailStops: true, network: "ip",
		disp:    display{cmd: true, comments: true, question: true, answer: true, authority: true, additional: true, stats: true, ttl: true, class: true},
		defType: dnsmessage.TypeA, defClass: dnsmessage.ClassINET,
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "@") && len(a) > 1:
			o.servers = append(o.servers, a[1:])
		case strings.HasPrefix(a, "+") && len(a) > 1:
			if err := o.plus(a[1:]); err != nil {
				return o, err
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			value := func() (string, error) {
				if len(a) > 2 {
					return a[2:], nil
				}
				if i+1 < len(args) {
					i++
					return args[i], nil
				}
				return "", invalid("Invalid option: %s", a)
			}
			switch a[1] {
			case '4', '6':
				if len(a) > 2 {
					return o, invalid("Invalid option: %s", a)
				}
				o.network = "ip" + a[1:2]
			case 'h':
				o.versionOrHelpTo, o.versionOrHelp = stdout, help
				return o, nil
			case 'v':
				o.versionOrHelpTo, o.versionOrHelp = stderr, "DiG "+version+"\n"
				return o, nil
			case 'r', 'u', 'm', 'd', 'i':
				// no ~/.digrc; microseconds and debugging: nothing to change
			case 'p':
				v, err := value()
				if err != nil {
					return o, err
				}
				n, err := strconv.ParseUint(v, 10, 16)
				if err != nil {
					return o, fatal("Couldn't parse port number")
				}
				o.port = uint16(n)
			case 't':
				v, err := value()
				if err != nil {
					return o, err
				}
				t, ok := parseType(v)
				if !ok {
					return o, invalid("Invalid type: %s", v)
				}
				o.setType(t)
			case 'c':
				v, err := value()
				if err != nil {
					return o, err
				}
				c, ok := parseClass(v)
				if !ok {
					return o, invalid("Invalid class: %s", v)
				}
				o.setClass(c)
			case 'q':
				v, err := value()
				if err != nil {
					return o, err
				}
				o.lookups = append(o.lookups, lookup{name: v, qtype: o.defType, class: o.defClass})
			case 'x':
				v, err := value()
				if err != nil {
					return o, err
				}
				a, err := netip.ParseAddr(v)
				if err != nil || a.Zone() != "" {
					return o, fatal("'%s' is not a legal IPv4 or IPv6 address", v)
				}
				o.lookups = append(o.lookups, lookup{name: dnsstub.ReverseName(a), qtype: dnsmessage.TypePTR, class: dnsmessage.ClassINET, absolute: true})
			default:
				return o, invalid("Invalid option: %s", a)
			}
		default:
			if t, ok := parseType(a); ok {
				o.setType(t)
			} else if c, ok := parseClass(a); ok {
				o.setClass(c)
			} else {
				o.lookups = append(o.lookups, lookup{name: a, qtype: o.defType, class: o.defClass})
			}
		}
	}
	if len(o.lookups) == 0 {
		// The root's NS, unless told another type.
		t := dnsmessage.TypeNS
		if o.defTypeSet {
			t = o.defType
		}
		o.lookups = []lookup{{name: ".", qtype: t, class: o.defClass, absolute: true}}
	}
	return o, nil
}

// setType sets the type of the last lookup, or the default before one.
func (o *options) setType(t dnsmessage.Type) {
	if n := len(o.lookups); n > 0 {
		o.lookups[n-1].qtype = t
	} else {
		o.defType, o.defTypeSet = t, true
	}
}

func (o *options) setClass(c dnsmessage.Class) {
	if n := len(o.lookups); n > 0 {
		o.lookups[n-1].class = c
	} else {
		o.defClass = c
	}
}

// plus applies one +[no]keyword[=value].
func (o *options) plus(opt string) error {
	keyword, value, hasValue := strings.Cut(opt, "=")
	state := true
	if k, ok := strings.CutPrefix(keyword, "no"); ok && k != "" {
		keyword, state = k, false
	}
	number := func(lo int) (int, error) {
		n, err := strconv.Atoi(value)
		if !hasValue || err != nil || n < 0 {
			return 0, invalid("Invalid option: +%s", opt)
		}
		return max(n, lo), nil
	}
	d := &o.disp
	switch keyword {
	case "tcp", "vc":
		o.tcp = state
	case "search", "defname":
		o.search = state
	case "showsearch":
		o.showSearch, o.search = state, state || o.search
	case "domain":
		if !hasValue || value == "" {
			return invalid("Invalid option: +%s", opt)
		}
		o.domain, o.search = value, true
	case "short":
		d.short = state
		if state {
			d.cmd, d.comments, d.question, d.authority, d.additional, d.stats = false, false, false, false, false, false
			d.answer = true
		}
	case "all":
		d.cmd, d.comments, d.question, d.answer, d.authority, d.additional, d.stats = state, state, state, state, state, state, state
	case "cmd":
		d.cmd = state
	case "comments":
		d.comments = state
	case "question":
		d.question = state
	case "answer":
		d.answer = state
	case "authority":
		d.authority = state
	case "additional":
		d.additional = state
	case "stats":
		d.stats = state
	case "ttlid":
		d.ttl = state
	case "class", "cl":
		d.class = state
	case "time", "timeout":
		n, err := number(1)
		if err != nil {
			return err
		}
		o.timeout = time.Duration(n) * time.Second
	case "tries":
		n, err := number(1)
		if err != nil {
			return err
		}
		o.tries = n
	case "retry":
		n, err := number(0)
		if err != nil {
			return err
		}
		o.tries = n + 1
	case "ndots":
		n, err := number(0)
		if err != nil {
			return err
		}
		o.ndots = n
	case "recurse", "rec":
		o.recurse = state
	case "aaflag", "aaonly":
		o.aa = state
	case "adflag":
		o.ad = state
	case "cdflag":
		o.cd = state
	case "edns":
		o.edns = state
	case "bufsize":
		if hasValue {
			n, err := number(0)
			if err != nil || n > 65535 {
				return invalid("Invalid option: +%s", opt)
			}
			o.bufsize = n
		}
		o.edns = o.edns || state
	case "dnssec", "do":
		o.dnssec = state
		o.edns = o.edns || state
	case "ignore":
		o.ignoreTC = state
	case "fail":
		o.servfailStops = state
	case "cookie", "nsid", "multiline", "rrcomments", "besteffort", "idnin", "idnout", "keepopen",
		"crypto", "ttlunits", "onesoa", "split", "qr", "identify", "expire", "padding", "mapped",
		"unknownformat", "header-only", "ednsnegotiation", "ednsflags", "ednsopt", "zflag", "subnet":
		// Nothing to change in the answers the e2e suite reads.
	default:
		return invalid("Invalid option: +%s", opt)
	}
	return nil
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is dig with args, and its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stdout, stderr)
	var ee *exitError
	if errors.As(err, &ee) {
		fmt.Fprint(stderr, ee.msg)
		return ee.code
	}
	if o.versionOrHelpTo != nil {
		fmt.Fprint(o.versionOrHelpTo, o.versionOrHelp)
		return 0
	}
	conf, err := dnsstub.ReadConf(resolvConfPath)
	if err != nil {
		fmt.Fprintf(stderr, "dig: %v\n", err)
	}
	servers, err := o.serverList(ctx, conf)
	if errors.As(err, &ee) {
		fmt.Fprint(stderr, ee.msg)
		return ee.code
	}
	if o.disp.cmd {
		fmt.Fprintf(stdout, "\n; <<>> DiG %s <<>> %s\n", version, strings.Join(args, " "))
		fmt.Fprintf(stdout, ";; global options: +cmd\n")
	}
	d := digger{options: o, conf: conf, servers: servers, out: stdout, err: stderr}
	if d.ndots < 0 {
		d.ndots = conf.Ndots
	}
	if d.tries == 0 {
		d.tries = orElse(conf.Attempts, 3)
	}
	status := 0
	for _, l := range o.lookups {
		status = max(status, d.lookup(ctx, l))
	}
	return status
}

// orElse is a unless it is zero, else b.
func orElse[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}

// server is one server to ask, and how dig names it.
type server struct {
	addr netip.AddrPort
	name string
}

// serverList is the servers to ask: @server's, or resolv.conf's.
func (o *options) serverList(ctx context.Context, conf dnsstub.Conf) ([]server, error) {
	var out []server
	keep := func(a netip.Addr, name string) {
		a = a.Unmap()
		if o.network == "ip4" && !a.Is4() || o.network == "ip6" && !a.Is6() {
			return
		}
		out = append(out, server{addr: netip.AddrPortFrom(a, o.port), name: name})
	}
	if len(o.servers) == 0 {
		addrs := conf.Nameservers
		if len(addrs) == 0 {
			addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
		}
		for _, a := range addrs {
			keep(a, a.String())
		}
		return out, nil
	}
	for _, s := range o.servers {
		if a, err := netip.ParseAddr(s); err == nil {
			keep(a, s)
			continue
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, o.network, s)
		if err != nil || len(addrs) == 0 {
			return nil, fatal("couldn't get address for '%s': not found", s)
		}
		for _, a := range addrs {
			keep(a, s)
		}
	}
	return out, nil
}

// digger runs the lookups.
type digger struct {
	options
	conf    dnsstub.Conf
	servers []server
	out     io.Writer
	err     io.Writer
}

// names is the names a lookup tries, in order (see the package doc).
func (d *digger) names(l lookup) []string {
	if l.absolute || strings.HasSuffix(l.name, ".") {
		return []string{l.name}
	}
	if !d.search || dnsstub.Dots(l.name) >= d.ndots {
		return []string{l.name + "."}
	}
	search := d.conf.Search
	if d.domain != "" {
		search = []string{d.domain}
	}
	var out []string
	for _, domain := range search {
		out = append(out, dnsstub.Join(l.name, domain))
	}
	return append(out, l.name+".")
}

// lookup asks l and prints the reply. Its status is 0 when a server
// replied, 9 when none did and 10 when the name cannot be asked.
func (d *digger) lookup(ctx context.Context, l lookup) int {
	names := d.names(l)
	for i, name := range names {
		q := dnsstub.Query{
			ID: uint16(rand.UintN(1 << 16)), Name: name, Type: l.qtype, Class: l.class,
			RecursionDesired: d.recurse, Authoritative: d.aa, AuthenticData: d.ad, CheckingDisabled: d.cd,
			EDNS: d.edns, UDPSize: d.bufsize, DNSSECOK: d.dnssec,
		}
		query, err := q.Pack()
		if err != nil {
			if i < len(names)-1 {
				continue // too long in this domain
			}
			fmt.Fprintf(d.err, "dig: '%s' is not a legal name (%v)\n", l.name, err)
			return 10
		}
		rep, ok := d.ask(ctx, query)
		if !ok {
			fmt.Fprintf(d.out, ";; no servers could be reached\n")
			return 9
		}
		if rep.rcode == dnsmessage.RCodeNameError && i < len(names)-1 {
			if d.showSearch {
				d.print(rep)
			}
			continue
		}
		d.print(rep)
		return 0
	}
	return 0
}

// ask sends query to the servers in turn until one replies.
func (d *digger) ask(ctx context.Context, query []byte) (*reply, bool) {
	for i, s := range d.servers {
		rep, ok := d.askServer(ctx, s, query, d.tcp)
		if !ok {
			continue
		}
		if rep.rcode == dnsmessage.RCodeServerFailure && !d.servfailStops && i < len(d.servers)-1 {
			fmt.Fprintf(d.out, ";; Got SERVFAIL reply from %s, trying next server\n", s.addr.Addr())
			continue
		}
		return rep, true
	}
	return nil, false
}

// askServer tries s up to d.tries times; a truncated UDP reply is asked
// again over TCP.
func (d *digger) askServer(ctx context.Context, s server, query []byte, tcp bool) (*reply, bool) {
	network, timeout := "udp", orElse(d.timeout, d.conf.Timeout)
	if tcp {
		network = "tcp"
	}
	if timeout == 0 {
		timeout = 5 * time.Second
		if tcp {
			timeout = 10 * time.Second
		}
	}
	for range d.tries {
		start := time.Now()
		b, err := dnsstub.Exchange(ctx, network, s.addr, query, timeout)
		if err != nil {
			reason := dnsstub.Reason(err)
			fmt.Fprintf(d.out, ";; communications error to %s#%d: %s\n", s.addr.Addr(), s.addr.Port(), reason)
			if reason == "timed out" {
				continue
			}
			return nil, false
		}
		rep, err := parseReply(b)
		if err != nil {
			fmt.Fprintf(d.out, ";; Warning: Message parser reports malformed message packet.\n")
			continue
		}
		if rep.h.Truncated && !tcp && !d.ignoreTC {
			if d.disp.comments {
				fmt.Fprintf(d.out, ";; Truncated, retrying in TCP mode.\n")
			}
			return d.askServer(ctx, s, query, true)
		}
		rep.elapsed, rep.server, rep.network = time.Since(start), s, strings.ToUpper(network)
		return rep, true
	}
	return nil, false
}
