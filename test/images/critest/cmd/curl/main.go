// Command curl fetches an http:// URL with a GET, like curl, for the
// Kubernetes e2e images: upstream agnhost is Alpine with curl, and the
// NodeConformance specs run it there (lifecycle hooks `curl URL`, the
// networking checks `curl -g -q -s -w %{http_code} ... URL`). Debian ships
// no static curl, and these images have no libc.
//
// Usage: curl [-g] [-q] [-s] [-S] [-f] [-i] [-L] [-o FILE] [-w FORMAT]
// [--max-time SECONDS] [--connect-timeout SECONDS] [--interface ADDR] URL
//
// --interface sends from ADDR, an address or an interface's name (the
// HostPort spec reaches 127.0.0.1 from the node's address).
//
// It writes the body to standard output (or FILE), after the status line
// and headers with -i; -w writes FORMAT after it, with %{http_code} and
// \n replaced. -g, -q, -s and -S are accepted and change nothing (no
// globbing, no config file, no progress meter is ever shown). Exit codes
// are curl's: 0 done (any HTTP status, unless -f), 3 a malformed URL, 6 a
// host that does not resolve, 7 a refused connection, 22 an HTTP error
// with -f, 23 a write error, 28 a timeout, 2 a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	include, fail, follow bool
	output, format        string
	iface                 string // --interface: the local address (or interface) to send from
	maxTime, connect      time.Duration
	url                   string
}

func parse(args []string) (options, error) {
	o := options{output: "-"}
	args = expandShort(args)
	seconds := func(v string) (time.Duration, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("bad seconds %q", v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("option %s needs a value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch a {
		case "-g", "--globoff", "-q", "--disable", "-s", "--silent", "-S", "--show-error":
		case "-i", "--include":
			o.include = true
		case "-f", "--fail":
			o.fail = true
		case "-L", "--location":
			o.follow = true
		case "-o", "--output":
			o.output, err = value()
		case "-w", "--write-out":
			o.format, err = value()
		case "--interface":
			o.iface, err = value()
		case "-m", "--max-time", "--connect-timeout":
			var v string
			if v, err = value(); err == nil {
				var d time.Duration
				if d, err = seconds(v); err == nil {
					if a == "--connect-timeout" {
						o.connect = d
					} else {
						o.maxTime = d
					}
				}
			}
		default:
			if strings.HasPrefix(a, "-") && a != "-" {
				return o, fmt.Errorf("option %s: is unknown", a)
			}
			if o.url != "" {
				return o, fmt.Errorf("one URL only (got %q and %q)", o.url, a)
			}
			o.url = a
		}
		if err != nil {
			return o, err
		}
	}
	if o.url == "" {
		return o, errors.New("no URL specified")
	}
	return o, nil
}

// expandShort splits short flags run together (-qs, -sS) into one each.
func expandShort(args []string) []string {
	var out []string
	for _, a := range args {
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && strings.Trim(a[1:], "gqsSifL") == "" {
			for _, c := range a[1:] {
				out = append(out, "-"+string(c))
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// exitCode is curl's exit code for a failed request.
func exitCode(err error) int {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded), os.IsTimeout(err):
		return 28
	case errors.As(err, &dns):
		return 6
	case errors.Is(err, syscall.EADDRNOTAVAIL): // --interface: not an address of this host
		return 45
	case errors.As(err, &op) && op.Op == "dial":
		return 7
	}
	return 56 // a failure receiving data
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "curl: %v\n", err)
		return 2
	}
	if !strings.Contains(o.url, "://") {
		o.url = "http://" + o.url
	}
	u, err := url.Parse(o.url)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		fmt.Fprintf(stderr, "curl: (3) URL rejected: %s\n", o.url)
		return 3
	}
	ctx := context.Background()
	if o.maxTime > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.maxTime)
		defer cancel()
	}
	dialer := &net.Dialer{Timeout: o.connect}
	if o.iface != "" {
		ip, err := localAddr(o.iface)
		if err != nil {
			fmt.Fprintf(stderr, "curl: (45) bind failed: %v\n", err)
			return 45
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, Proxy: nil, DisableCompression: true}}
	if !o.follow {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		fmt.Fprintf(stderr, "curl: (3) %v\n", err)
		return 3
	}
	req.Header.Set("User-Agent", "curl/8")
	req.Header.Set("Accept", "*/*")
	resp, err := client.Do(req)
	if err != nil {
		code := exitCode(err)
		fmt.Fprintf(stderr, "curl: (%d) %v\n", code, err)
		return code
	}
	defer resp.Body.Close()
	if o.fail && resp.StatusCode >= 400 {
		fmt.Fprintf(stderr, "curl: (22) The requested URL returned error: %d\n", resp.StatusCode)
		return 22
	}
	out := stdout
	if o.output != "-" {
		f, err := os.Create(o.output)
		if err != nil {
			fmt.Fprintf(stderr, "curl: (23) %v\n", err)
			return 23
		}
		defer f.Close()
		out = f
	}
	if o.include {
		fmt.Fprintf(out, "%s %s\r\n", resp.Proto, resp.Status)
		if err := resp.Header.Write(out); err != nil {
			return 23
		}
		fmt.Fprint(out, "\r\n")
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		code := exitCode(err)
		fmt.Fprintf(stderr, "curl: (%d) %v\n", code, err)
		return code
	}
	if o.format != "" {
		fmt.Fprint(stdout, strings.NewReplacer("%{http_code}", fmt.Sprintf("%03d", resp.StatusCode), `\n`, "\n").Replace(o.format))
	}
	return 0
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// localAddr is --interface's address: curl takes an IP address, an
// interface's name (its first address) or "if!NAME"/"host!ADDR".
func localAddr(v string) (net.IP, error) {
	if kind, rest, ok := strings.Cut(v, "!"); ok && (kind == "if" || kind == "host") {
		v = rest
	}
	if ip := net.ParseIP(v); ip != nil {
		return ip, nil
	}
	ifc, err := net.InterfaceByName(v)
	if err != nil {
		return nil, err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			return n.IP, nil
		}
	}
	return nil, fmt.Errorf("interface %s has no address", v)
}
