package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCurl(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("X-Test", "yes")
			_, _ = w.Write([]byte(r.URL.Query().Get("msg")))
		case "/from":
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			_, _ = w.Write([]byte(host))
		case "/slow":
			time.Sleep(2 * time.Second)
		case "/moved":
			http.Redirect(w, r, "/echo?msg=followed", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	file := filepath.Join(t.TempDir(), "body")

	for _, tc := range []struct {
		args []string
		code int
		out  string // stdout, or its prefix when it ends in "..."
	}{
		{[]string{srv.URL + "/echo?msg=prestop"}, 0, "prestop"},
		{[]string{"-g", "-q", "-s", srv.URL + "/echo?msg=x"}, 0, "x"},
		{[]string{"-qs", "-o", "/dev/null", "-w", "%{http_code}", srv.URL + "/echo"}, 0, "200"},
		{[]string{"-s", "-w", "%{http_code}", srv.URL + "/nope"}, 0, "404 page not found\n404"},
		{[]string{"-f", "-s", srv.URL + "/nope"}, 22, ""},
		{[]string{"-i", srv.URL + "/echo?msg=hi"}, 0, "HTTP/1.1 200 OK\r\n..."},
		{[]string{srv.URL + "/moved"}, 0, `<a href="/echo?msg=followed">Found</a>.` + "\n\n"},
		{[]string{"-L", srv.URL + "/moved"}, 0, "followed"},
		{[]string{"-o", file, strings.TrimPrefix(srv.URL, "http://") + "/echo?msg=to-file"}, 0, ""},
		{[]string{"--connect-timeout", "1", "http://" + closed + "/"}, 7, ""},
		{[]string{"--max-time", "0.2", srv.URL + "/slow"}, 28, ""},
		// --interface, as the HostPort spec sends from the node's address.
		{[]string{"-g", "--connect-timeout", "5", "--interface", "127.0.0.2", srv.URL + "/from"}, 0, "127.0.0.2"},
		{[]string{"--interface", "lo", srv.URL + "/from"}, 0, "127.0.0.1"},
		{[]string{"--interface", "192.0.2.254", srv.URL + "/from"}, 45, ""},
		{[]string{"--interface", "no-such-link0", srv.URL + "/from"}, 45, ""},
		{[]string{"-z", srv.URL}, 2, ""},
		{[]string{}, 2, ""},
		{[]string{"ftp://example.invalid/"}, 3, ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		got := stdout.String()
		ok := got == tc.out
		if p, cut := strings.CutSuffix(tc.out, "..."); cut {
			ok = strings.HasPrefix(got, p)
		}
		if code != tc.code || !ok {
			t.Errorf("curl %q: exit %d, stdout %q (stderr %q); want %d, %q", tc.args, code, got, stderr.String(), tc.code, tc.out)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "to-file" {
		t.Errorf("-o wrote %q (%v)", b, err)
	}
}
