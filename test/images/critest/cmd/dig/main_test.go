package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cri-compose/cri-compose/test/images/critest/internal/dnstest"
)

// A namespace's names as the cluster DNS serves them.
const (
	ns      = "dns-1234"
	svcFQDN = "kubernetes.default.svc.cluster.local."
	srvName = "_http._tcp.dns-test-service." + ns + ".svc.cluster.local."
	podFQDN = "dns-querier-1.dns-test-service." + ns + ".svc.cluster.local."
	extName = "dns-test-service-3." + ns + ".svc.cluster.local."
	podConf = "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions ndots:5\n"
)

// cluster starts a server of the cluster's records, with resolv.conf
// naming it: the nameservers' port is the server's.
func cluster(t *testing.T, conf string) *dnstest.Server {
	t.Helper()
	s := dnstest.Start(t,
		dnstest.A(svcFQDN, "10.96.0.1"),
		dnstest.AAAA(svcFQDN, "fd00::1"),
		dnstest.A(podFQDN, "10.244.1.5"),
		dnstest.SRV(srvName, 0, 100, 80, podFQDN),
		dnstest.PTR("1.0.96.10.in-addr.arpa.", svcFQDN),
		dnstest.CNAME(extName, "foo.example.com."),
		dnstest.A("foo.example.com.", "192.0.2.123"),
		dnstest.A("notexistname.resolv.conf.local.", "1.1.1.1"),
		dnstest.A("a.example.", "192.0.2.1"),
	)
	withConf(t, conf)
	oldPort := port
	port = s.Port()
	t.Cleanup(func() { port = oldPort })
	return s
}

func withConf(t *testing.T, conf string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	old := resolvConfPath
	resolvConfPath = path
	t.Cleanup(func() { resolvConfPath = old })
}

type result struct {
	code           int
	stdout, stderr string
}

func dig(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// asked is what s was asked, as "network name type".
func asked(s *dnstest.Server) []string {
	var out []string
	for _, a := range s.Asked() {
		out = append(out, fmt.Sprintf("%s %s %s", a.Network, a.Name, typeText(a.Type)))
	}
	return out
}

// TestProbe: createProbeCommand's `dig +notcp|+tcp +noall +answer +search
// NAME [TYPE]`: the short name through the search list, over the
// transport asked, printed as dig prints the answer section.
func TestProbe(t *testing.T) {
	for _, c := range []struct {
		args  []string
		want  string
		asked []string
	}{
		{
			[]string{"+notcp", "+noall", "+answer", "+search", "kubernetes.default", "A"},
			"kubernetes.default.svc.cluster.local. 30 IN A\t10.96.0.1\n",
			[]string{"udp kubernetes.default." + ns + ".svc.cluster.local. A", "udp kubernetes.default.svc.cluster.local. A"},
		},
		{
			[]string{"+tcp", "+noall", "+answer", "+search", "kubernetes.default", "A"},
			"kubernetes.default.svc.cluster.local. 30 IN A\t10.96.0.1\n",
			[]string{"tcp kubernetes.default." + ns + ".svc.cluster.local. A", "tcp kubernetes.default.svc.cluster.local. A"},
		},
		{
			[]string{"+notcp", "+noall", "+answer", "+search", "kubernetes.default.svc", "AAAA"},
			"kubernetes.default.svc.cluster.local. 30 IN AAAA fd00::1\n",
			[]string{"udp kubernetes.default.svc." + ns + ".svc.cluster.local. AAAA", "udp kubernetes.default.svc.svc.cluster.local. AAAA", "udp kubernetes.default.svc.cluster.local. AAAA"},
		},
		{
			// Fewer dots than ndots: the search list first, then the name.
			[]string{"+tcp", "+noall", "+answer", "+search", "kubernetes.default.svc.cluster.local"},
			"kubernetes.default.svc.cluster.local. 30 IN A\t10.96.0.1\n",
			[]string{
				"tcp kubernetes.default.svc.cluster.local." + ns + ".svc.cluster.local. A",
				"tcp kubernetes.default.svc.cluster.local.svc.cluster.local. A",
				"tcp kubernetes.default.svc.cluster.local.cluster.local. A",
				"tcp kubernetes.default.svc.cluster.local. A",
			},
		},
		{
			[]string{"+notcp", "+noall", "+answer", "+search", "_http._tcp.dns-test-service." + ns + ".svc", "SRV"},
			// The name ends at column 55: a tab reaches 56, past the TTL's 24.
			srvName + "\t30 IN SRV 0 100 80 " + podFQDN + "\n",
			nil,
		},
		{
			// dnsclient.Reverseaddr's name is absolute.
			[]string{"+tcp", "+noall", "+answer", "+search", "1.0.96.10.in-addr.arpa.", "PTR"},
			"1.0.96.10.in-addr.arpa.\t30\tIN\tPTR\t" + svcFQDN + "\n",
			[]string{"tcp 1.0.96.10.in-addr.arpa. PTR"},
		},
		{
			[]string{"+notcp", "+noall", "+answer", "+search", "a.example."},
			"a.example.\t\t30\tIN\tA\t192.0.2.1\n",
			[]string{"udp a.example. A"},
		},
		{
			// NXDOMAIN everywhere: nothing printed, a reply came.
			[]string{"+notcp", "+noall", "+answer", "+search", "nothere"},
			"",
			[]string{"udp nothere." + ns + ".svc.cluster.local. A", "udp nothere.svc.cluster.local. A", "udp nothere.cluster.local. A", "udp nothere. A"},
		},
		{
			// An empty answer (NOERROR) ends the search, as NXDOMAIN does not.
			[]string{"+notcp", "+noall", "+answer", "+search", "kubernetes.default", "TXT"},
			"",
			[]string{"udp kubernetes.default." + ns + ".svc.cluster.local. TXT", "udp kubernetes.default.svc.cluster.local. TXT"},
		},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			s := cluster(t, podConf)
			r := dig(c.args...)
			if r.code != 0 || r.stdout != c.want || r.stderr != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 0, %q", r.code, r.stdout, r.stderr, c.want)
			}
			if got := asked(s); c.asked != nil && !reflect.DeepEqual(got, c.asked) {
				t.Errorf("asked %q, want %q", got, c.asked)
			}
		})
	}
}

// TestNdots: with as many dots as ndots a name is asked only as it is;
// without +search always.
func TestNdots(t *testing.T) {
	s := cluster(t, "search svc.cluster.local\nnameserver 127.0.0.1\noptions ndots:1\n")
	if r := dig("+noall", "+answer", "+search", "kubernetes.default"); r.code != 0 || r.stdout != "" {
		t.Errorf("ndots:1: exit %d, stdout %q; want 0 and nothing", r.code, r.stdout)
	}
	if r := dig("+noall", "+answer", "+search", "+ndots=2", "kubernetes.default"); r.code != 0 || !strings.Contains(r.stdout, "10.96.0.1") {
		t.Errorf("+ndots=2: exit %d, stdout %q; want the address", r.code, r.stdout)
	}
	if r := dig("+short", "kubernetes"); r.code != 0 || r.stdout != "" {
		t.Errorf("no +search: exit %d, stdout %q; want 0 and nothing", r.code, r.stdout)
	}
	want := []string{"udp kubernetes.default. A", "udp kubernetes.default.svc.cluster.local. A", "udp kubernetes. A"}
	if got := asked(s); !reflect.DeepEqual(got, want) {
		t.Errorf("asked %q, want %q", got, want)
	}
}

// TestShort: +short prints the data alone, a CNAME's target before the
// address; -x asks the PTR; @server and -p choose the server.
func TestShort(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"+short", svcFQDN}, "10.96.0.1\n"},
		{[]string{"+short", "kubernetes.default.svc.cluster.local", "AAAA"}, "fd00::1\n"},
		{[]string{"+short", extName, "CNAME"}, "foo.example.com.\n"},
		{[]string{"+short", extName}, "foo.example.com.\n192.0.2.123\n"},
		{[]string{"+short", "-x", "10.96.0.1"}, svcFQDN + "\n"},
		{[]string{"+short", "nothere.example"}, ""},
		{[]string{"-t", "SRV", "+short", srvName}, "0 100 80 " + podFQDN + "\n"},
	} {
		cluster(t, podConf)
		if r := dig(c.args...); r.code != 0 || r.stdout != c.want {
			t.Errorf("dig %s: exit %d, stdout %q, stderr %q; want 0, %q", strings.Join(c.args, " "), r.code, r.stdout, r.stderr, c.want)
		}
	}

	// The configurable resolv.conf spec: a search domain of its own, ndots:2.
	cluster(t, "nameserver 127.0.0.1\nsearch resolv.conf.local\noptions ndots:2\n")
	if r := dig("+short", "+search", "notexistname"); r.code != 0 || r.stdout != "1.1.1.1\n" {
		t.Errorf("+short +search notexistname: exit %d, stdout %q; want 1.1.1.1", r.code, r.stdout)
	}

	// @server and -p: resolv.conf's nameserver is not asked.
	s := cluster(t, "nameserver 192.0.2.53\n")
	if r := dig("+short", "@127.0.0.1", "-p", fmt.Sprint(s.Port()), "+time=1", "+tries=1", svcFQDN); r.code != 0 || r.stdout != "10.96.0.1\n" {
		t.Errorf("@127.0.0.1 -p: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestFull: without display options, dig's header, sections and stats.
func TestFull(t *testing.T) {
	s := cluster(t, podConf)
	r := dig("kubernetes.default.svc.cluster.local")
	for _, want := range []string{
		"\n; <<>> DiG " + version + " <<>> kubernetes.default.svc.cluster.local\n;; global options: +cmd\n;; Got answer:\n",
		";; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: ",
		"\n;; flags: qr aa rd ra; QUERY: 1, ANSWER: 1, AUTHORITY: 0, ADDITIONAL: 1\n\n;; OPT PSEUDOSECTION:\n; EDNS: version: 0, flags:; udp: 1232\n",
		"\n;; QUESTION SECTION:\n;kubernetes.default.svc.cluster.local. IN A\n\n;; ANSWER SECTION:\nkubernetes.default.svc.cluster.local. 30 IN A\t10.96.0.1\n\n;; Query time: ",
		fmt.Sprintf("\n;; SERVER: 127.0.0.1#%d(127.0.0.1) (UDP)\n;; WHEN: ", s.Port()),
		"\n;; MSG SIZE  rcvd: ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = dig("+nocmd", "+nostats", "+noedns", "nothere.example")
	want := ";; Got answer:\n;; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN, id: "
	if r.code != 0 || !strings.HasPrefix(r.stdout, want) {
		t.Errorf("NXDOMAIN: exit %d, output %q, want it to begin %q", r.code, r.stdout, want)
	}
	want = "\n;; flags: qr aa rd ra; QUERY: 1, ANSWER: 0, AUTHORITY: 1, ADDITIONAL: 0\n\n" +
		";; QUESTION SECTION:\n;nothere.example.\t\tIN\tA\n\n" +
		";; AUTHORITY SECTION:\ncluster.local.\t\t30\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local. 1700000000 7200 1800 86400 30\n\n"
	if !strings.HasSuffix(r.stdout, want) {
		t.Errorf("NXDOMAIN: output %q, want it to end %q", r.stdout, want)
	}
}

// TestTruncated: a truncated UDP reply is asked again over TCP.
func TestTruncated(t *testing.T) {
	s := cluster(t, podConf)
	s.TruncateUDP(svcFQDN)
	if r := dig("+noall", "+answer", svcFQDN); r.code != 0 || r.stdout != "kubernetes.default.svc.cluster.local. 30 IN A\t10.96.0.1\n" {
		t.Errorf("exit %d, stdout %q", r.code, r.stdout)
	}
	if got, want := asked(s), []string{"udp " + svcFQDN + " A", "tcp " + svcFQDN + " A"}; !reflect.DeepEqual(got, want) {
		t.Errorf("asked %q, want %q", got, want)
	}
}

// TestNoReply: exit status 9 and dig's messages on standard output when no
// server replies: a timeout per try, a refused connection at once.
func TestNoReply(t *testing.T) {
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	withConf(t, "nameserver 127.0.0.1\n")
	p := silent.LocalAddr().(*net.UDPAddr).Port
	r := dig("+short", "+time=1", "+tries=2", "-p", fmt.Sprint(p), "kubernetes.default")
	want := fmt.Sprintf(";; communications error to 127.0.0.1#%d: timed out\n", p)
	if r.code != 9 || r.stdout != want+want+";; no servers could be reached\n" {
		t.Errorf("UDP: exit %d, stdout %q", r.code, r.stdout)
	}

	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p = l.Addr().(*net.TCPAddr).Port
	l.Close()
	r = dig("+tcp", "+noall", "+answer", "-p", fmt.Sprint(p), "kubernetes.default")
	want = fmt.Sprintf(";; communications error to 127.0.0.1#%d: connection refused\n;; no servers could be reached\n", p)
	if r.code != 9 || r.stdout != want {
		t.Errorf("TCP: exit %d, stdout %q, want %q", r.code, r.stdout, want)
	}
}

func TestUsage(t *testing.T) {
	withConf(t, "")
	for _, args := range [][]string{{"+bogus", "a.example"}, {"-z"}, {"+time=x", "a"}, {"-p"}} {
		if r := dig(args...); r.code != 1 || !strings.HasPrefix(r.stderr, "Invalid option: ") || r.stdout != "" {
			t.Errorf("dig %q: exit %d, stderr %q, stdout %q; want 1 and Invalid option", args, r.code, r.stderr, r.stdout)
		}
	}
	if r := dig("-x", "not-an-address"); r.code != 10 {
		t.Errorf("-x not-an-address: exit %d, want 10", r.code)
	}
	if r := dig("-h"); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage:") {
		t.Errorf("-h: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestColumns: BIND's tab stops, and a space past them.
func TestColumns(t *testing.T) {
	d := display{ttl: true, class: true}
	for _, c := range []struct {
		r    record
		want string
	}{
		{record{name: "google.com.", ttl: 300, class: 1, typ: dnsmessage.TypeA, data: "142.250.80.46"}, "google.com.\t\t300\tIN\tA\t142.250.80.46"},
		{record{name: "example.com.", ttl: 86400, class: 1, typ: dnsmessage.TypeAAAA, data: "2606:2800::1"}, "example.com.\t\t86400\tIN\tAAAA\t2606:2800::1"},
		{record{name: "abcdefghijklmnopqrstuvw.", ttl: 5, class: 1, typ: dnsmessage.TypeA, data: "192.0.2.1"}, "abcdefghijklmnopqrstuvw. 5\tIN\tA\t192.0.2.1"},
	} {
		if got := d.recordLine(c.r); got != c.want {
			t.Errorf("recordLine: %q, want %q", got, c.want)
		}
	}
	if got, want := (display{}).recordLine(record{name: "a.", class: 1, typ: dnsmessage.TypeA, data: "192.0.2.1"}), "a.\t\t\tA\t192.0.2.1"; got != want {
		t.Errorf("+nottlid +noclass: %q, want %q", got, want)
	}
}
