package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// record is one resource record, its data in BIND's presentation format.
type record struct {
	name  string
	ttl   uint32
	class dnsmessage.Class
	typ   dnsmessage.Type
	data  string
}

// edns is a reply's OPT record.
type edns struct {
	version uint8
	do      bool
	udp     uint16
}

// reply is a parsed reply and where it came from.
type reply struct {
	h                             dnsmessage.Header
	rcode                         dnsmessage.RCode // with OPT's extended bits
	questions                     []dnsmessage.Question
	answer, authority, additional []record
	opt                           *edns
	size                          int
	elapsed                       time.Duration
	server                        server
	network                       string // "UDP" or "TCP"
}

func parseReply(b []byte) (*reply, error) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil {
		return nil, err
	}
	r := &reply{h: h, rcode: h.RCode, size: len(b)}
	if r.questions, err = p.AllQuestions(); err != nil {
		return nil, err
	}
	if r.answer, err = section(&p, p.AnswerHeader, nil); err != nil {
		return nil, err
	}
	if r.authority, err = section(&p, p.AuthorityHeader, nil); err != nil {
		return nil, err
	}
	if r.additional, err = section(&p, p.AdditionalHeader, r); err != nil {
		return nil, err
	}
	return r, nil
}

// section reads the records of one section. The OPT record of the
// additional section goes to r.
func section(p *dnsmessage.Parser, next func() (dnsmessage.ResourceHeader, error), r *reply) ([]record, error) {
	var out []record
	for {
		h, err := next()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Type == dnsmessage.TypeOPT && r != nil {
			if _, err := p.OPTResource(); err != nil {
				return nil, err
			}
			r.opt = &edns{version: uint8(h.TTL >> 16), do: h.TTL&0x8000 != 0, udp: uint16(h.Class)}
			r.rcode = dnsmessage.RCode(uint16(h.TTL>>24)<<4 | uint16(r.h.RCode))
			continue
		}
		data, err := rdata(p, h.Type)
		if err != nil {
			return nil, err
		}
		out = append(out, record{name: nameText(h.Name), ttl: h.TTL, class: h.Class, typ: h.Type, data: data})
	}
}

// rdata reads a record's data as BIND prints it.
func rdata(p *dnsmessage.Parser, t dnsmessage.Type) (string, error) {
	switch t {
	case dnsmessage.TypeA:
		r, err := p.AResource()
		return netip.AddrFrom4(r.A).String(), err
	case dnsmessage.TypeAAAA:
		r, err := p.AAAAResource()
		return netip.AddrFrom16(r.AAAA).String(), err
	case dnsmessage.TypeCNAME:
		r, err := p.CNAMEResource()
		return nameText(r.CNAME), err
	case dnsmessage.TypeNS:
		r, err := p.NSResource()
		return nameText(r.NS), err
	case dnsmessage.TypePTR:
		r, err := p.PTRResource()
		return nameText(r.PTR), err
	case dnsmessage.TypeMX:
		r, err := p.MXResource()
		return fmt.Sprintf("%d %s", r.Pref, nameText(r.MX)), err
	case dnsmessage.TypeSRV:
		r, err := p.SRVResource()
		return fmt.Sprintf("%d %d %d %s", r.Priority, r.Weight, r.Port, nameText(r.Target)), err
	case dnsmessage.TypeSOA:
		r, err := p.SOAResource()
		return fmt.Sprintf("%s %s %d %d %d %d %d", nameText(r.NS), nameText(r.MBox), r.Serial, r.Refresh, r.Retry, r.Expire, r.MinTTL), err
	case dnsmessage.TypeTXT:
		r, err := p.TXTResource()
		quoted := make([]string, len(r.TXT))
		for i, s := range r.TXT {
			quoted[i] = txtText(s)
		}
		return strings.Join(quoted, " "), err
	}
	r, err := p.UnknownResource()
	if len(r.Data) == 0 {
		return `\# 0`, err
	}
	return fmt.Sprintf(`\# %d %X`, len(r.Data), r.Data), err
}

// nameText is a name as BIND prints it: special characters escaped with
// a backslash, others outside printable ASCII as \DDD.
func nameText(n dnsmessage.Name) string {
	s := n.String()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '.' || c == '-' || c == '_' || c == '/' || c == '*' || c == '+' || c == '=' ||
			'0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			b.WriteByte(c)
		case strings.IndexByte(`"();\@$`, c) >= 0:
			b.WriteByte('\\')
			b.WriteByte(c)
		case c <= ' ' || c >= 0x7f:
			fmt.Fprintf(&b, `\%03d`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// txtText is one character-string of a TXT record, quoted.
func txtText(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c >= 0x7f:
			fmt.Fprintf(&b, `\%03d`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

var typeNames = map[dnsmessage.Type]string{
	1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 13: "HINFO", 15: "MX", 16: "TXT", 28: "AAAA",
	33: "SRV", 35: "NAPTR", 41: "OPT", 43: "DS", 46: "RRSIG", 47: "NSEC", 48: "DNSKEY", 52: "TLSA",
	64: "SVCB", 65: "HTTPS", 251: "IXFR", 252: "AXFR", 255: "ANY", 257: "CAA",
}

var classNames = map[dnsmessage.Class]string{1: "IN", 3: "CH", 4: "HS", 254: "NONE", 255: "ANY"}

func typeText(t dnsmessage.Type) string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}

func classText(c dnsmessage.Class) string {
	if s, ok := classNames[c]; ok {
		return s
	}
	return "CLASS" + strconv.Itoa(int(c))
}

// parseType reads a type word: a mnemonic or TYPEnnn, in any case.
func parseType(s string) (dnsmessage.Type, bool) {
	u := strings.ToUpper(s)
	for t, name := range typeNames {
		if name == u && t != dnsmessage.TypeOPT {
			return t, true
		}
	}
	if n, ok := strings.CutPrefix(u, "TYPE"); ok {
		if v, err := strconv.ParseUint(n, 10, 16); err == nil {
			return dnsmessage.Type(v), true
		}
	}
	return 0, false
}

// parseClass reads a class word: IN, CH (CHAOS), HS (HESIOD), NONE or
// CLASSnnn, in any case (ANY is a type first, as for dig).
func parseClass(s string) (dnsmessage.Class, bool) {
	switch u := strings.ToUpper(s); u {
	case "IN":
		return dnsmessage.ClassINET, true
	case "CH", "CHAOS":
		return dnsmessage.ClassCHAOS, true
	case "HS", "HESIOD":
		return dnsmessage.ClassHESIOD, true
	case "NONE":
		return 254, true
	default:
		if n, ok := strings.CutPrefix(u, "CLASS"); ok {
			if v, err := strconv.ParseUint(n, 10, 16); err == nil {
				return dnsmessage.Class(v), true
			}
		}
	}
	return 0, false
}

var opcodes = []string{"QUERY", "IQUERY", "STATUS", "RESERVED3", "NOTIFY", "UPDATE"}

var rcodes = []string{
	"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "YXDOMAIN", "YXRRSET",
	"NXRRSET", "NOTAUTH", "NOTZONE", "RESERVED11", "RESERVED12", "RESERVED13", "RESERVED14",
	"RESERVED15", "BADVERS",
}

func opcodeText(o dnsmessage.OpCode) string {
	if int(o) < len(opcodes) {
		return opcodes[o]
	}
	return "RESERVED" + strconv.Itoa(int(o))
}

func rcodeText(r dnsmessage.RCode) string {
	if int(r) < len(rcodes) {
		return rcodes[r]
	}
	return strconv.Itoa(int(r))
}

// columns are where dig's style puts the TTL, class, type and data: a
// field left out shifts the following ones left.
func (d display) columns() (ttl, class, typ, data int) {
	switch {
	case !d.ttl && !d.class:
		return 24, 24, 24, 32
	case !d.ttl || !d.class:
		return 24, 24, 32, 40
	}
	return 24, 32, 40, 48
}

// line writes fields at columns as BIND's masterdump does: tabs (of width
// 8) to each column, or one space when the text before is past it.
type line struct {
	b   strings.Builder
	col int
}

func (l *line) field(to int, s string) {
	from := l.col
	to = max(to, from+1)
	if tabs := to/8 - from/8; tabs > 0 {
		l.b.WriteString(strings.Repeat("\t", tabs))
		from = to / 8 * 8
	}
	l.b.WriteString(strings.Repeat(" ", to-from))
	l.b.WriteString(s)
	l.col = to + len(s)
}

// recordLine is one record as dig prints it in a section.
func (d display) recordLine(r record) string {
	ttlCol, classCol, typeCol, dataCol := d.columns()
	var l line
	l.b.WriteString(r.name)
	l.col = len(r.name)
	if d.ttl {
		l.field(ttlCol, strconv.FormatUint(uint64(r.ttl), 10))
	}
	if d.class {
		l.field(classCol, classText(r.class))
	}
	l.field(typeCol, typeText(r.typ))
	l.field(dataCol, r.data)
	return l.b.String()
}

// questionLine is a question as dig prints it: ";name", then the class
// and type at their columns (the ";" takes no column).
func (d display) questionLine(q dnsmessage.Question) string {
	_, classCol, typeCol, _ := d.columns()
	var l line
	name := nameText(q.Name)
	l.b.WriteString(";" + name)
	l.col = len(name)
	if d.class {
		l.field(classCol, classText(q.Class))
	}
	l.field(typeCol, typeText(q.Type))
	return l.b.String()
}

// print writes the reply as the display options say.
func (d *digger) print(r *reply) {
	disp := d.disp
	var b strings.Builder
	if disp.short {
		for _, rec := range r.answer {
			b.WriteString(rec.data + "\n")
		}
		fmt.Fprint(d.out, b.String())
		return
	}
	if disp.comments {
		b.WriteString(";; Got answer:\n")
		fmt.Fprintf(&b, ";; ->>HEADER<<- opcode: %s, status: %s, id: %d\n", opcodeText(r.h.OpCode), rcodeText(r.rcode), r.h.ID)
		var flags string
		for _, f := range []struct {
			set  bool
			name string
		}{
			{r.h.Response, "qr"}, {r.h.Authoritative, "aa"}, {r.h.Truncated, "tc"}, {r.h.RecursionDesired, "rd"},
			{r.h.RecursionAvailable, "ra"}, {r.h.AuthenticData, "ad"}, {r.h.CheckingDisabled, "cd"},
		} {
			if f.set {
				flags += " " + f.name
			}
		}
		additional := len(r.additional)
		if r.opt != nil {
			additional++
		}
		fmt.Fprintf(&b, ";; flags:%s; QUERY: %d, ANSWER: %d, AUTHORITY: %d, ADDITIONAL: %d\n",
			flags, len(r.questions), len(r.answer), len(r.authority), additional)
		if r.h.RecursionDesired && !r.h.RecursionAvailable {
			b.WriteString(";; WARNING: recursion requested but not available\n")
		}
		b.WriteString("\n")
	}
	if r.opt != nil && disp.additional {
		if disp.comments {
			b.WriteString(";; OPT PSEUDOSECTION:\n")
		}
		flags := ""
		if r.opt.do {
			flags = " do"
		}
		fmt.Fprintf(&b, "; EDNS: version: %d, flags:%s; udp: %d\n", r.opt.version, flags, r.opt.udp)
	}
	if disp.question && len(r.questions) > 0 {
		if disp.comments {
			b.WriteString(";; QUESTION SECTION:\n")
		}
		for _, q := range r.questions {
			b.WriteString(disp.questionLine(q) + "\n")
		}
		if disp.comments {
			b.WriteString("\n")
		}
	}
	for _, s := range []struct {
		show    bool
		name    string
		records []record
	}{
		{disp.answer, "ANSWER", r.answer}, {disp.authority, "AUTHORITY", r.authority}, {disp.additional, "ADDITIONAL", r.additional},
	} {
		if !s.show || len(s.records) == 0 {
			continue
		}
		if disp.comments {
			b.WriteString(";; " + s.name + " SECTION:\n")
		}
		for _, rec := range s.records {
			b.WriteString(disp.recordLine(rec) + "\n")
		}
		if disp.comments {
			b.WriteString("\n")
		}
	}
	if disp.stats {
		fmt.Fprintf(&b, ";; Query time: %d msec\n", r.elapsed.Milliseconds())
		fmt.Fprintf(&b, ";; SERVER: %s#%d(%s) (%s)\n", r.server.addr.Addr(), r.server.addr.Port(), r.server.name, r.network)
		fmt.Fprintf(&b, ";; WHEN: %s\n", time.Now().Format("Mon Jan 02 15:04:05 MST 2006"))
		fmt.Fprintf(&b, ";; MSG SIZE  rcvd: %d\n\n", r.size)
	}
	fmt.Fprint(d.out, b.String())
}
