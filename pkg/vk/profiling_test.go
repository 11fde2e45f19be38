package vk

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

func TestWithProfiling(t *testing.T) {
	h := WithProfiling(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "api "+r.URL.Path)
	}), false)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/debug/pprof/cmdline"); code != 200 || !strings.Contains(body, os.Args[0]) {
		t.Errorf("cmdline: %d %q, want this process's command line", code, body)
	}
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "TestWithProfiling") {
		t.Errorf("goroutine profile: %d, %d bytes without this test's goroutine", code, len(body))
	}
	// The kubelet API keeps its own paths, unclean ones included.
	for _, p := range []string{"/pods", "/containerLogs/ns/p/c", "/exec//x"} {
		if code, body := get(p); code != 200 || body != "api "+p {
			t.Errorf("%s: %d %q, want the API's answer", p, code, body)
		}
	}
}
