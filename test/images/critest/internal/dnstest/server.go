// Package dnstest is a DNS server for the tests of test/images/critest's
// cmd/dig and cmd/getent: it answers from a table of records over UDP and
// TCP on one port of 127.0.0.1, as an authoritative server for every name
// (NXDOMAIN for a name without records, an empty answer for a type the
// name lacks, CNAMEs followed within the table), and logs what it is
// asked.
package dnstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Record is one record of the table.
type Record struct {
	Name string // rooted: "kubernetes.default.svc.cluster.local."
	TTL  uint32
	Body dnsmessage.ResourceBody
}

// Asked is one question the server was asked.
type Asked struct {
	Network string // "udp" or "tcp"
	Name    string
	Type    dnsmessage.Type
}

// Server answers from its records until the test ends.
type Server struct {
	Addr netip.AddrPort

	mu       sync.Mutex
	records  []Record
	asked    []Asked
	truncate map[string]bool
}

// Start starts a server of records on 127.0.0.1 and stops it when t ends.
func Start(t testing.TB, records ...Record) *Server {
	t.Helper()
	s := &Server{records: records, truncate: map[string]bool{}}
	var udp net.PacketConn
	var tcp net.Listener
	for range 20 { // the same free port for both
		u, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp4", u.LocalAddr().String())
		if err != nil {
			u.Close()
			continue
		}
		udp, tcp = u, l
		break
	}
	if udp == nil {
		t.Fatal("dnstest: no port free for both UDP and TCP")
	}
	s.Addr = udp.LocalAddr().(*net.UDPAddr).AddrPort()
	t.Cleanup(func() { udp.Close(); tcp.Close() })
	go s.serveUDP(udp)
	go s.serveTCP(tcp)
	return s
}

// Port is the server's port.
func (s *Server) Port() uint16 { return s.Addr.Port() }

// TruncateUDP makes the server answer name over UDP with TC set and no
// records, so that the client must ask again over TCP.
func (s *Server) TruncateUDP(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.truncate[strings.ToLower(name)] = true
}

// Asked is what the server was asked, in order.
func (s *Server) Asked() []Asked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Asked(nil), s.asked...)
}

func (s *Server) serveUDP(c net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		if reply := s.reply(buf[:n], "udp"); reply != nil {
			_, _ = c.WriteTo(reply, from)
		}
	}
}

func (s *Server) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				var n [2]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(n[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				reply := s.reply(msg, "tcp")
				if reply == nil {
					return
				}
				if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...)); err != nil {
					return
				}
			}
		}()
	}
}

// reply answers the query msg, or is nil when msg is no query.
func (s *Server) reply(msg []byte, network string) []byte {
	var m dnsmessage.Message
	if err := m.Unpack(msg); err != nil || m.Response || len(m.Questions) != 1 {
		return nil
	}
	q := m.Questions[0]
	s.mu.Lock()
	s.asked = append(s.asked, Asked{Network: network, Name: q.Name.String(), Type: q.Type})
	truncate := network == "udp" && s.truncate[strings.ToLower(q.Name.String())]
	s.mu.Unlock()

	r := dnsmessage.Message{
		Header: dnsmessage.Header{
			ID: m.ID, Response: true, Authoritative: true,
			RecursionDesired: m.RecursionDesired, RecursionAvailable: true,
		},
		Questions: m.Questions,
	}
	if truncate {
		r.Truncated = true
	} else {
		r.Answers, r.RCode = s.answer(q)
		if r.RCode == dnsmessage.RCodeNameError || len(r.Answers) == 0 {
			r.Authorities = []dnsmessage.Resource{soa()}
		}
	}
	for _, a := range m.Additionals {
		if a.Header.Type == dnsmessage.TypeOPT {
			var h dnsmessage.ResourceHeader
			if err := h.SetEDNS0(1232, dnsmessage.RCodeSuccess, false); err == nil {
				r.Additionals = append(r.Additionals, dnsmessage.Resource{Header: h, Body: &dnsmessage.OPTResource{}})
			}
		}
	}
	out, err := r.Pack()
	if err != nil {
		return nil
	}
	return out
}

// answer is the records that answer q, following CNAMEs, and the code:
// NXDOMAIN when the last name has no records at all.
func (s *Server) answer(q dnsmessage.Question) ([]dnsmessage.Resource, dnsmessage.RCode) {
	var out []dnsmessage.Resource
	name := q.Name.String()
	for range 8 {
		var cname *dnsmessage.CNAMEResource
		found, exists := false, false
		for _, rec := range s.records {
			if !strings.EqualFold(rec.Name, name) {
				continue
			}
			exists = true
			t := typeOf(rec.Body)
			switch {
			case t == q.Type || q.Type == dnsmessage.TypeALL:
				out = append(out, resource(rec))
				found = true
			case t == dnsmessage.TypeCNAME:
				cname = rec.Body.(*dnsmessage.CNAMEResource)
				if !found {
					out = append(out, resource(rec))
				}
			}
		}
		switch {
		case !exists:
			return out, dnsmessage.RCodeNameError
		case found || cname == nil:
			return out, dnsmessage.RCodeSuccess
		}
		name = cname.CNAME.String()
	}
	return out, dnsmessage.RCodeSuccess
}

func resource(r Record) dnsmessage.Resource {
	return dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(r.Name), Class: dnsmessage.ClassINET, TTL: r.TTL},
		Body:   r.Body,
	}
}

// soa is the authority of negative answers, as CoreDNS's for the cluster
// domain.
func soa() dnsmessage.Resource {
	return dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("cluster.local."), Class: dnsmessage.ClassINET, TTL: 30},
		Body: &dnsmessage.SOAResource{
			NS: dnsmessage.MustNewName("ns.dns.cluster.local."), MBox: dnsmessage.MustNewName("hostmaster.cluster.local."),
			Serial: 1700000000, Refresh: 7200, Retry: 1800, Expire: 86400, MinTTL: 30,
		},
	}
}

func typeOf(b dnsmessage.ResourceBody) dnsmessage.Type {
	switch b := b.(type) {
	case *dnsmessage.AResource:
		return dnsmessage.TypeA
	case *dnsmessage.AAAAResource:
		return dnsmessage.TypeAAAA
	case *dnsmessage.CNAMEResource:
		return dnsmessage.TypeCNAME
	case *dnsmessage.PTRResource:
		return dnsmessage.TypePTR
	case *dnsmessage.SRVResource:
		return dnsmessage.TypeSRV
	case *dnsmessage.TXTResource:
		return dnsmessage.TypeTXT
	case *dnsmessage.MXResource:
		return dnsmessage.TypeMX
	case *dnsmessage.NSResource:
		return dnsmessage.TypeNS
	case *dnsmessage.SOAResource:
		return dnsmessage.TypeSOA
	case *dnsmessage.UnknownResource:
		return b.Type
	}
	panic(errors.New("dnstest: a record of a type it does not know"))
}

// A, AAAA, CNAME, PTR and SRV make records.
func A(name, addr string) Record {
	return Record{Name: name, TTL: 30, Body: &dnsmessage.AResource{A: netip.MustParseAddr(addr).As4()}}
}

func AAAA(name, addr string) Record {
	return Record{Name: name, TTL: 30, Body: &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr(addr).As16()}}
}

func CNAME(name, target string) Record {
	return Record{Name: name, TTL: 30, Body: &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(target)}}
}

func PTR(name, target string) Record {
	return Record{Name: name, TTL: 30, Body: &dnsmessage.PTRResource{PTR: dnsmessage.MustNewName(target)}}
}

func SRV(name string, priority, weight, port uint16, target string) Record {
	return Record{Name: name, TTL: 30, Body: &dnsmessage.SRVResource{
		Priority: priority, Weight: weight, Port: port, Target: dnsmessage.MustNewName(target),
	}}
}
