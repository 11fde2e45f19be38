// Command getent is glibc's getent for its hosts database, for the
// Kubernetes e2e images (test/images/kubee2e): upstream agnhost is Alpine
// (musl's getent) and glibc-dns-testing is Debian (glibc's), and the
// [sig-network] DNS specs run `getent hosts NAME` in both, where NAME is
// the pod's FQDN or its short hostname, both in the /etc/hosts the kubelet
// writes.
//
// Usage: getent [-i] hosts [KEY...]
//
// A KEY that is an IPv6 or IPv4 address is looked up as gethostbyaddr
// does: /etc/hosts's first line with that address, else the PTR record of
// its in-addr.arpa or ip6.arpa name. Any other KEY is looked up as
// gethostbyname2 does with nsswitch's "hosts: files dns", IPv6 first and
// then IPv4, as glibc's getent: /etc/hosts's lines of that family that
// name KEY (as their canonical name or an alias, in any case; several
// lines are merged, as with host.conf's "multi on"), else the AAAA (then
// A) records of KEY in DNS, following CNAMEs (the names they lead from are
// the aliases, the last one the canonical name).
//
// DNS is asked as glibc's res_search does, from /etc/resolv.conf (its
// nameservers, 127.0.0.1 without any; its search list, or the domain of
// the host name without one; options ndots, timeout and attempts): a name
// with a final dot is asked as it is; one with at least ndots dots as it
// is first, then in each search domain; one with fewer in each search
// domain, then as it is. NXDOMAIN, an empty answer or SERVFAIL moves on to
// the next name; the first answer with records ends the search, and a
// server that does not answer ends it too. Each query goes over UDP (TCP
// when the reply is truncated) to each nameserver in turn, attempts
// times (2 by default), waiting timeout seconds (5) for each; a SERVFAIL,
// NOTIMP or REFUSED reply moves on to the next server.
//
// Each address found prints one line as glibc's print_hosts does: the
// address padded to 15 characters, a space, the canonical name and each
// alias after a space. Without a KEY every line of /etc/hosts prints so.
// The exit status is 0 when every KEY was found, 2 when one was not, and
// 1 for a database other than hosts or no database. Agnhost gets this
// glibc behaviour too, in place of musl's (whose lines pad the address
// to 16 and put two spaces after it): the specs only test that a line
// comes.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cri-compose/cri-compose/test/images/critest/internal/dnsstub"
)

// The files getent reads, the nameservers' port and the host name (for
// the default search domain). Tests change them.
var (
	hostsPath             = "/etc/hosts"
	resolvConfPath        = "/etc/resolv.conf"
	port           uint16 = 53
	hostname              = os.Hostname
)

const try = "Try `getent --help' or `getent --usage' for more information.\n"

const help = `Usage: getent [OPTION...] database [key ...]
Get entries from administrative database.

  -i, --no-idn               disable IDN encoding
  -?, --help                 Give this help list
      --usage                Give a short usage message

Supported databases:
hosts
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is getent with args, and its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
options:
	for len(args) > 0 && strings.HasPrefix(args[0], "-") && args[0] != "-" {
		a := args[0]
		args = args[1:]
		switch a {
		case "--":
			break options
		case "-i", "--no-idn":
		case "-?", "--help":
			fmt.Fprint(stdout, help)
			return 0
		case "--usage":
			fmt.Fprint(stdout, "Usage: getent [-i?] [--no-idn] [--help] [--usage] database [key ...]\n")
			return 0
		default:
			fmt.Fprintf(stderr, "getent: unrecognized option '%s'\n", a)
			fmt.Fprint(stderr, try)
			return 64
		}
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "getent: wrong number of arguments\n")
		fmt.Fprint(stdout, try)
		return 1
	}
	if args[0] != "hosts" {
		fmt.Fprintf(stderr, "Unknown database: %s\n", args[0])
		fmt.Fprint(stdout, try)
		return 1
	}
	entries, err := readHosts(hostsPath)
	if err != nil {
		fmt.Fprintf(stderr, "getent: %v\n", err)
	}
	keys := args[1:]
	if len(keys) == 0 {
		for _, e := range entries {
			printHost(stdout, host{name: e.names[0], aliases: e.names[1:], addrs: []netip.Addr{e.addr}})
		}
		return 0
	}
	r := newResolver()
	status := 0
	for _, key := range keys {
		h, ok := lookup(ctx, r, entries, key)
		if !ok {
			status = 2
			continue
		}
		printHost(stdout, h)
	}
	return status
}

// host is a struct hostent: the canonical name, the aliases, the
// addresses.
type host struct {
	name    string
	aliases []string
	addrs   []netip.Addr
}

// printHost is glibc getent's print_hosts.
func printHost(w io.Writer, h host) {
	var b strings.Builder
	for _, a := range h.addrs {
		fmt.Fprintf(&b, "%-15s %s", a, h.name)
		for _, alias := range h.aliases {
			b.WriteString(" " + alias)
		}
		b.WriteString("\n")
	}
	fmt.Fprint(w, b.String())
}

// lookup finds key as getent's hosts_keys does.
func lookup(ctx context.Context, r *resolver, entries []hostsEntry, key string) (host, bool) {
	if a, err := netip.ParseAddr(key); err == nil && a.Zone() == "" {
		for _, e := range entries {
			if e.addr == a {
				return host{name: e.names[0], aliases: e.names[1:], addrs: []netip.Addr{a}}, true
			}
		}
		return r.byAddr(ctx, a)
	}
	for _, v6 := range []bool{true, false} {
		if h, ok := byNameInFiles(entries, key, v6); ok {
			return h, true
		}
		if h, ok := r.byName(ctx, key, v6); ok {
			return h, true
		}
	}
	return host{}, false
}

// hostsEntry is one line of /etc/hosts.
type hostsEntry struct {
	addr  netip.Addr
	names []string // the canonical name, then the aliases
}

// readHosts reads the hosts file at path; a missing one has no lines.
func readHosts(path string) ([]hostsEntry, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []hostsEntry
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil || a.Zone() != "" {
			continue
		}
		out = append(out, hostsEntry{addr: a, names: fields[1:]})
	}
	return out, s.Err()
}

// byNameInFiles is the files backend of gethostbyname2: the lines of the
// family (IPv6 when v6) that name name, merged.
func byNameInFiles(entries []hostsEntry, name string, v6 bool) (host, bool) {
	var h host
	for _, e := range entries {
		if e.addr.Is4() == v6 || !containsFold(e.names, name) {
			continue
		}
		if len(h.addrs) == 0 {
			h = host{name: e.names[0], aliases: append([]string(nil), e.names[1:]...), addrs: []netip.Addr{e.addr}}
			continue
		}
		if !contains(h.addrs, e.addr) {
			h.addrs = append(h.addrs, e.addr)
		}
		for _, n := range e.names {
			if n != h.name && !contains(h.aliases, n) {
				h.aliases = append(h.aliases, n)
			}
		}
	}
	return h, len(h.addrs) > 0
}

func containsFold(names []string, name string) bool {
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// resolver asks DNS as glibc's stub resolver does.
type resolver struct {
	search   []string
	ndots    int
	servers  []netip.AddrPort
	timeout  time.Duration
	attempts int
}

func newResolver() *resolver {
	conf, _ := dnsstub.ReadConf(resolvConfPath)
	r := &resolver{search: conf.Search, ndots: conf.Ndots, timeout: conf.Timeout, attempts: conf.Attempts}
	if len(r.search) == 0 {
		if h, err := hostname(); err == nil {
			if _, domain, ok := strings.Cut(h, "."); ok && domain != "" {
				r.search = []string{domain}
			}
		}
	}
	addrs := conf.Nameservers
	if len(addrs) == 0 {
		addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	for _, a := range addrs {
		r.servers = append(r.servers, netip.AddrPortFrom(a, port))
	}
	if r.timeout == 0 {
		r.timeout = 5 * time.Second
	}
	if r.attempts == 0 {
		r.attempts = 2
	}
	return r
}

// names is res_search's order of the names to ask for name.
func (r *resolver) names(name string) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	var out []string
	asIsFirst := dnsstub.Dots(name) >= r.ndots
	if asIsFirst {
		out = append(out, name+".")
	}
	for _, domain := range r.search {
		if n := dnsstub.Join(name, domain); !contains(out, n) {
			out = append(out, n)
		}
	}
	if !asIsFirst && !contains(out, name+".") {
		out = append(out, name+".")
	}
	return out
}

// rr is one answer record: its owner, and the address or the name it
// holds.
type rr struct {
	owner  string
	typ    dnsmessage.Type
	addr   netip.Addr
	target string
}

// byName is the dns backend of gethostbyname2: the AAAA (v6) or A records
// of name, found through the search list.
func (r *resolver) byName(ctx context.Context, name string, v6 bool) (host, bool) {
	qtype := dnsmessage.TypeA
	if v6 {
		qtype = dnsmessage.TypeAAAA
	}
	for _, n := range r.names(name) {
		rcode, answers, ok := r.query(ctx, n, qtype)
		switch {
		case !ok:
			return host{}, false // no server answered: TRY_AGAIN ends the search
		case rcode == dnsmessage.RCodeSuccess && len(answers) > 0:
			return hostFromAnswers(n, qtype, answers)
		case rcode == dnsmessage.RCodeSuccess, rcode == dnsmessage.RCodeNameError, rcode == dnsmessage.RCodeServerFailure:
			continue
		default:
			return host{}, false
		}
	}
	return host{}, false
}

// hostFromAnswers follows the CNAMEs from qname to the records of qtype.
func hostFromAnswers(qname string, qtype dnsmessage.Type, answers []rr) (host, bool) {
	canon := qname
	var h host
	for _, a := range answers {
		if !strings.EqualFold(a.owner, canon) {
			continue
		}
		switch a.typ {
		case dnsmessage.TypeCNAME:
			h.aliases = append(h.aliases, strings.TrimSuffix(a.owner, "."))
			canon = a.target
		case qtype:
			h.addrs = append(h.addrs, a.addr)
		}
	}
	h.name = strings.TrimSuffix(canon, ".")
	return h, len(h.addrs) > 0
}

// byAddr is the dns backend of gethostbyaddr: the PTR record of a's
// reverse name.
func (r *resolver) byAddr(ctx context.Context, a netip.Addr) (host, bool) {
	name := dnsstub.ReverseName(a)
	rcode, answers, ok := r.query(ctx, name, dnsmessage.TypePTR)
	if !ok || rcode != dnsmessage.RCodeSuccess {
		return host{}, false
	}
	canon := name
	for _, ans := range answers {
		if !strings.EqualFold(ans.owner, canon) {
			continue
		}
		switch ans.typ {
		case dnsmessage.TypeCNAME:
			canon = ans.target
		case dnsmessage.TypePTR:
			return host{name: strings.TrimSuffix(ans.target, "."), addrs: []netip.Addr{a}}, true
		}
	}
	return host{}, false
}

// query asks each server in turn, attempts times, for name's records of
// qtype, and returns the reply's code and answers; ok is false when no
// server replied. A SERVFAIL, NOTIMP or REFUSED reply moves on to the next
// server, and is the reply when no other comes.
func (r *resolver) query(ctx context.Context, name string, qtype dnsmessage.Type) (dnsmessage.RCode, []rr, bool) {
	q := dnsstub.Query{ID: uint16(rand.UintN(1 << 16)), Name: name, Type: qtype, Class: dnsmessage.ClassINET, RecursionDesired: true}
	msg, err := q.Pack()
	if err != nil {
		return dnsmessage.RCodeNameError, nil, true // not a name: as not found
	}
	var failed *dnsmessage.RCode
	for range r.attempts {
		for _, s := range r.servers {
			reply, err := dnsstub.Exchange(ctx, "udp", s, msg, r.timeout)
			if err == nil && truncated(reply) {
				reply, err = dnsstub.Exchange(ctx, "tcp", s, msg, r.timeout)
			}
			if err != nil {
				continue
			}
			rcode, answers, err := parseAnswers(reply)
			if err != nil {
				continue
			}
			switch rcode {
			case dnsmessage.RCodeServerFailure, dnsmessage.RCodeNotImplemented, dnsmessage.RCodeRefused:
				failed = &rcode
				continue
			}
			return rcode, answers, true
		}
		if failed != nil {
			return *failed, nil, true
		}
	}
	return 0, nil, false
}

func truncated(reply []byte) bool {
	var p dnsmessage.Parser
	h, err := p.Start(reply)
	return err == nil && h.Truncated
}

// parseAnswers reads a reply's code and the answer records getent uses.
func parseAnswers(reply []byte) (dnsmessage.RCode, []rr, error) {
	var p dnsmessage.Parser
	h, err := p.Start(reply)
	if err != nil {
		return 0, nil, err
	}
	if err := p.SkipAllQuestions(); err != nil {
		return 0, nil, err
	}
	var out []rr
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return h.RCode, out, nil
		}
		if err != nil {
			return 0, nil, err
		}
		a := rr{owner: rh.Name.String(), typ: rh.Type}
		switch rh.Type {
		case dnsmessage.TypeA:
			b, err := p.AResource()
			if err != nil {
				return 0, nil, err
			}
			a.addr = netip.AddrFrom4(b.A)
		case dnsmessage.TypeAAAA:
			b, err := p.AAAAResource()
			if err != nil {
				return 0, nil, err
			}
			a.addr = netip.AddrFrom16(b.AAAA)
		case dnsmessage.TypeCNAME:
			b, err := p.CNAMEResource()
			if err != nil {
				return 0, nil, err
			}
			a.target = b.CNAME.String()
		case dnsmessage.TypePTR:
			b, err := p.PTRResource()
			if err != nil {
				return 0, nil, err
			}
			a.target = b.PTR.String()
		default:
			if err := p.SkipAnswer(); err != nil {
				return 0, nil, err
			}
		}
		out = append(out, a)
	}
}
