package cri_test

// Streaming URLs are capabilities: whoever holds one reaches a shell in a
// container. They are single-use and expire (k8s.io/cri-streaming's token
// cache: 8 random base64 characters, consumed by the first request,
// forgotten after one minute; the library does not let the minute be
// changed).

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// postStatus sends a plain POST (no protocol upgrade) to a streaming URL
// and returns the HTTP status: the library consumes the URL's token before
// it looks at the request, so any request uses the URL up.
func postStatus(t *testing.T, u string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// streamURLs hands out one URL of each kind for a running container.
func (e *criEnv) streamURLs(podID, ctrID string) map[string]string {
	e.t.Helper()
	rt := e.rt()
	out := map[string]string{"exec": e.execURL(&runtime.ExecRequest{ContainerId: ctrID, Cmd: []string{"true"}, Stdout: true})}
	a, err := rt.Attach(e.ctx(), &runtime.AttachRequest{ContainerId: ctrID, Stdout: true})
	if err != nil {
		e.t.Fatalf("Attach: %v", err)
	}
	out["attach"] = a.GetUrl()
	pf, err := rt.PortForward(e.ctx(), &runtime.PortForwardRequest{PodSandboxId: podID, Port: []int32{80}})
	if err != nil {
		e.t.Fatalf("PortForward: %v", err)
	}
	out["port-forward"] = pf.GetUrl()
	return out
}

// TestStreamURLsSingleUse: every kind of streaming URL (exec's full
// session is in TestStreamExec) is refused with 404 once it was used, and
// so is a made-up token.
func TestStreamURLsSingleUse(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	podID, ctrID := e.streamPod("streamonce", "sleep 3600", nil)
	for kind, u := range e.streamURLs(podID, ctrID) {
		if code := postStatus(t, u); code == http.StatusNotFound {
			t.Errorf("%s URL refused (404) on first use", kind)
		}
		if code := postStatus(t, u); code != http.StatusNotFound {
			t.Errorf("%s URL on second use: HTTP %d, want 404", kind, code)
		}
		forged := u[:strings.LastIndex(u, "/")+1] + "AAAAAAAA"
		if code := postStatus(t, forged); code != http.StatusNotFound {
			t.Errorf("%s URL with a made-up token: HTTP %d, want 404", kind, code)
		}
	}
}

// TestStreamURLsExpire: an unused URL is refused after the library's
// minute. It waits that minute, so it runs only in the soak mode
// (CRI_COMPOSE_SOAK=1, make soak).
func TestStreamURLsExpire(t *testing.T) {
	if os.Getenv("CRI_COMPOSE_SOAK") == "" {
		t.Skip("waits a minute: set CRI_COMPOSE_SOAK=1 (make soak)")
	}
	t.Parallel()
	e := newCRIEnv(t)
	podID, ctrID := e.streamPod("streamexpiry", "sleep 3600", nil)
	urls := e.streamURLs(podID, ctrID)
	time.Sleep(61 * time.Second)
	for kind, u := range urls {
		if code := postStatus(t, u); code != http.StatusNotFound {
			t.Errorf("%s URL unused for 61s: HTTP %d, want 404", kind, code)
		}
	}
	// URLs handed out now still work: the server is fine, only the old
	// ones expired.
	for kind, u := range e.streamURLs(podID, ctrID) {
		if code := postStatus(t, u); code == http.StatusNotFound {
			t.Errorf("new %s URL refused (404)", kind)
		}
	}
}
