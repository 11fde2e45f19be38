package dnsstub

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func TestReadConf(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte(`# a pod's, with more than MAXNS servers
domain example.org
search ns.svc.cluster.local svc.cluster.local cluster.local
; a comment
nameserver 10.96.0.10
nameserver not-an-address
nameserver fd00::a
nameserver 10.96.0.11
nameserver 10.96.0.12
options ndots:5 rotate
options timeout:60 attempts:2 edns0
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ReadConf(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Conf{
		Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::a"), netip.MustParseAddr("10.96.0.11")},
		Search:      []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Ndots:       5, Timeout: 30 * time.Second, Attempts: 2,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("ReadConf: %+v, want %+v", c, want)
	}

	// domain after search wins, as in both resolvers.
	if err := os.WriteFile(path, []byte("search a.example b.example\ndomain c.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := ReadConf(path); err != nil || !reflect.DeepEqual(c, Conf{Search: []string{"c.example"}, Ndots: 1}) {
		t.Errorf("domain after search: %+v, %v", c, err)
	}
	if c, err := ReadConf(filepath.Join(t.TempDir(), "missing")); err != nil || !reflect.DeepEqual(c, Conf{Ndots: 1}) {
		t.Errorf("a missing file: %+v, %v", c, err)
	}
}

func TestNames(t *testing.T) {
	for _, c := range []struct{ name, domain, want string }{
		{"kubernetes.default", "svc.cluster.local", "kubernetes.default.svc.cluster.local."},
		{"kubernetes.default", "svc.cluster.local.", "kubernetes.default.svc.cluster.local."},
		{"kubernetes", ".", "kubernetes."},
		{"_sip._tcp", "abc_d.example.com", "_sip._tcp.abc_d.example.com."},
	} {
		if got := Join(c.name, c.domain); got != c.want {
			t.Errorf("Join(%q, %q) = %q, want %q", c.name, c.domain, got, c.want)
		}
	}
	for addr, want := range map[string]string{
		"10.96.0.1":   "1.0.96.10.in-addr.arpa.",
		"2001:db8::1": "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.",
	} {
		if got := ReverseName(netip.MustParseAddr(addr)); got != want {
			t.Errorf("ReverseName(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestExchange: over UDP a datagram with another ID is not the reply.
func TestExchange(t *testing.T) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		buf := make([]byte, 512)
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		var m dnsmessage.Message
		if m.Unpack(buf[:n]) != nil {
			return
		}
		m.Response = true
		m.ID++
		stray, _ := m.Pack()
		m.ID--
		m.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: m.Questions[0].Name, Class: dnsmessage.ClassINET, TTL: 5},
			Body:   &dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}},
		}}
		reply, _ := m.Pack()
		_, _ = conn.WriteTo(stray, from)
		_, _ = conn.WriteTo(reply, from)
	}()
	q, err := Query{ID: 7, Name: "a.example.", Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, RecursionDesired: true, EDNS: true, UDPSize: 1232}.Pack()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Exchange(context.Background(), "udp", conn.LocalAddr().(*net.UDPAddr).AddrPort(), q, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil || m.ID != 7 || len(m.Answers) != 1 {
		t.Errorf("reply %+v, %v: want ID 7 and one answer", m, err)
	}

	// Nothing listens: refused at once over TCP.
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	if _, err := Exchange(context.Background(), "tcp", addr, q, 5*time.Second); Reason(err) != "connection refused" {
		t.Errorf("TCP to a closed port: %v (%q), want connection refused", err, Reason(err))
	}
}
