package dnsstub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Query is one question and the header bits and EDNS of the message that
// asks it.
type Query struct {
	ID    uint16
	Name  string // rooted: "kubernetes.default.svc.cluster.local."
	Type  dnsmessage.Type
	Class dnsmessage.Class
	// The header's RD, AA, AD and CD bits.
	RecursionDesired, Authoritative, AuthenticData, CheckingDisabled bool
	// EDNS adds an OPT record that offers UDPSize bytes (and sets DO when
	// DNSSECOK).
	EDNS     bool
	UDPSize  int
	DNSSECOK bool
}

// Pack is the query's wire form.
func (q Query) Pack() ([]byte, error) {
	name, err := dnsmessage.NewName(q.Name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q.Name, err)
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: q.ID, RecursionDesired: q.RecursionDesired, Authoritative: q.Authoritative,
		AuthenticData: q.AuthenticData, CheckingDisabled: q.CheckingDisabled,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: name, Type: q.Type, Class: q.Class}); err != nil {
		return nil, fmt.Errorf("%s: %w", q.Name, err)
	}
	if q.EDNS {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var h dnsmessage.ResourceHeader
		if err := h.SetEDNS0(q.UDPSize, dnsmessage.RCodeSuccess, q.DNSSECOK); err != nil {
			return nil, err
		}
		if err := b.OPTResource(h, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// Exchange sends the packed query to server over network ("udp" or
// "tcp") and returns the reply to it, waiting at most timeout in all. Over
// UDP, datagrams that carry another ID or question are dropped and the
// wait goes on, as stub resolvers do; over TCP such a reply is an error.
func Exchange(ctx context.Context, network string, server netip.AddrPort, query []byte, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, server.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if network == "tcp" {
		return exchangeTCP(conn, query)
	}
	return exchangeUDP(conn, query)
}

func exchangeUDP(conn net.Conn, query []byte) ([]byte, error) {
	if _, err := conn.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		if answers(buf[:n], query) {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

func exchangeTCP(conn net.Conn, query []byte) ([]byte, error) {
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
	if _, err := conn.Write(append(msg, query...)); err != nil {
		return nil, err
	}
	var n [2]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return nil, err
	}
	reply := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(conn, reply); err != nil {
		return nil, err
	}
	if !answers(reply, query) {
		return nil, errors.New("the reply does not answer the query")
	}
	return reply, nil
}

// answers reports whether reply is a response with query's ID and
// question. A reply without a question (FORMERR, REFUSED) answers too.
func answers(reply, query []byte) bool {
	var rp, qp dnsmessage.Parser
	rh, err := rp.Start(reply)
	if err != nil || !rh.Response {
		return false
	}
	qh, err := qp.Start(query)
	if err != nil || qh.ID != rh.ID {
		return false
	}
	rq, err := rp.Question()
	if errors.Is(err, dnsmessage.ErrSectionDone) {
		return true
	}
	qq, qerr := qp.Question()
	return err == nil && qerr == nil && rq.Type == qq.Type && rq.Class == qq.Class &&
		strings.EqualFold(rq.Name.String(), qq.Name.String())
}

// Reason is how the stub resolvers name a failed exchange: "timed out",
// "connection refused", and so on.
func Reason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "end of file"
	}
	return err.Error()
}
