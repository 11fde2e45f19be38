// Package dnsstub holds what test/images/critest's cmd/dig and cmd/getent
// share: resolv.conf(5) as stub resolvers read it, and one DNS query sent
// over UDP or TCP and its reply. Each program keeps its own search rules:
// dig's and glibc's differ.
package dnsstub

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// The limits glibc's res_init and BIND's resolv.conf reader share.
const (
	maxNameservers = 3  // MAXNS
	maxNdots       = 15 // RES_MAXNDOTS
	maxTimeout     = 30 // RES_MAXRETRANS, seconds
	maxAttempts    = 5  // RES_MAXRETRY
)

// Conf is what a stub resolver takes from resolv.conf.
type Conf struct {
	// Nameservers are the first three nameserver lines' addresses, in
	// order; none when the file has none (each program has its default).
	Nameservers []netip.Addr
	// Search is the search list as written: the last search line's
	// domains, or the last domain line's one domain, whichever comes last.
	Search []string
	// Ndots is options ndots:N (at most 15), 1 without it.
	Ndots int
	// Timeout is options timeout:N seconds (at most 30) and Attempts
	// options attempts:N (at most 5); zero without them.
	Timeout  time.Duration
	Attempts int
}

// ReadConf reads the resolv.conf at path. A missing file is a Conf with
// no nameservers and no search list, as for both resolvers.
func ReadConf(path string) (Conf, error) {
	c := Conf{Ndots: 1}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 || len(c.Nameservers) == maxNameservers {
				continue
			}
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				c.Nameservers = append(c.Nameservers, a)
			}
		case "domain":
			if len(fields) > 1 {
				c.Search = []string{fields[1]}
			}
		case "search":
			c.Search = append([]string(nil), fields[1:]...)
		case "options":
			for _, o := range fields[1:] {
				c.option(o)
			}
		}
	}
	return c, s.Err()
}

// option applies one word of an options line; those it does not know are
// ignored, as by both resolvers.
func (c *Conf) option(o string) {
	key, value, ok := strings.Cut(o, ":")
	if !ok {
		return
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 0 {
		return
	}
	switch key {
	case "ndots":
		c.Ndots = min(n, maxNdots)
	case "timeout":
		c.Timeout = time.Duration(min(max(n, 1), maxTimeout)) * time.Second
	case "attempts":
		c.Attempts = min(max(n, 1), maxAttempts)
	}
}

// Join is name (relative, without a final dot) in domain, a search list
// entry, as a rooted name: name + "." when domain is the root ("." or "").
func Join(name, domain string) string {
	domain = strings.TrimSuffix(domain, ".")
	if domain == "" {
		return name + "."
	}
	return name + "." + domain + "."
}

// Dots counts the dots of name, as both resolvers compare with ndots.
func Dots(name string) int { return strings.Count(name, ".") }

// ReverseName is a's name under in-addr.arpa or, for IPv6, ip6.arpa (one
// label a nibble), as dig -x and gethostbyaddr ask its PTR record.
func ReverseName(a netip.Addr) string {
	var b strings.Builder
	if a.Is4() {
		v := a.As4()
		for i := 3; i >= 0; i-- {
			fmt.Fprintf(&b, "%d.", v[i])
		}
		return b.String() + "in-addr.arpa."
	}
	const hex = "0123456789abcdef"
	v := a.As16()
	for i := 15; i >= 0; i-- {
		b.WriteByte(hex[v[i]&0xf])
		b.WriteByte('.')
		b.WriteByte(hex[v[i]>>4])
		b.WriteByte('.')
	}
	return b.String() + "ip6.arpa."
}
