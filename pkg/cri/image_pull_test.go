package cri_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	criimages "github.com/cri-compose/cri-compose/pkg/cri/images"
)

// slowBlobs serves a registry, but chosen blobs slowly: a stalled one
// sends half its bytes and then nothing until the test ends (an engine
// may keep the download open after its client gave up: Docker 20.10
// does); a trickled one sends chunk bytes every interval.
type slowBlobs struct {
	h    http.Handler
	quit chan struct{}

	mu     sync.Mutex
	paces  map[string]pace // by blob digest
	served chan string     // digests of slow blobs sent whole
}

type pace struct {
	stall    bool
	chunk    int
	interval time.Duration
}

// serveSlowBlobs serves h slowly as set says, and returns its address.
func serveSlowBlobs(t *testing.T, h http.Handler) (*slowBlobs, string) {
	s := &slowBlobs{h: h, quit: make(chan struct{}), paces: map[string]pace{}, served: make(chan string, 8)}
	addr := serveRegistry(t, s)
	// Before the server's Close, which waits for every handler.
	t.Cleanup(func() { close(s.quit) })
	return s, addr
}

func (s *slowBlobs) set(dg string, p pace) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paces[dg] = p
}

func (s *slowBlobs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := strings.LastIndex(r.URL.Path, "/blobs/")
	s.mu.Lock()
	p, slow := pace{}, false
	if i >= 0 && r.Method == http.MethodGet {
		p, slow = s.paces[r.URL.Path[i+len("/blobs/"):]]
	}
	s.mu.Unlock()
	if !slow {
		s.h.ServeHTTP(w, r)
		return
	}
	dg := r.URL.Path[i+len("/blobs/"):]
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	if p.stall {
		_, _ = w.Write(body[:len(body)/2])
		flush()
		select {
		case <-r.Context().Done():
		case <-s.quit:
		}
		return
	}
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for len(body) > 0 {
		n := min(p.chunk, len(body))
		if _, err := w.Write(body[:n]); err != nil {
			return
		}
		flush()
		body = body[n:]
		if len(body) > 0 {
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			case <-s.quit:
				return
			}
		}
	}
	s.served <- dg
}

// layerDigest is the digest of img's one layer.
func layerDigest(t *testing.T, img v1.Image) string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		t.Fatalf("layers: %v %v", ls, err)
	}
	dg, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return dg.String()
}

func wait(t *testing.T, ch <-chan string, want, what string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case dg := <-ch:
			if dg == want {
				return
			}
		case <-timeout:
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// A pull that makes no progress for the pull progress timeout is
// cancelled: through a mirror it passes to the next place, from the
// registry it fails with DeadlineExceeded. One that is slow but keeps
// going is not cancelled.
func TestImagePullProgressTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	h := newRegistry()
	slow, slowReg := serveSlowBlobs(t, h)
	e := newImageEnvWith(t, h, criimages.Options{
		Mirrors:             criimages.Mirrors{"registry.k8s.io": {"http://" + slowReg, "http://REGISTRY"}},
		PullProgressTimeout: timeout,
	})
	image := func(repo string) v1.Image {
		img, err := random.Image(256<<10, 1)
		if err != nil {
			t.Fatal(err)
		}
		e.pushImage(t, img, repo, "1")
		return img
	}

	t.Run("slow registry", func(t *testing.T) {
		repo := "stall/slow-" + e.suffix
		img := image(repo)
		dg := layerDigest(t, img)
		// 16 KiB every 400 ms: about 6 s for the layer, three times the
		// timeout, but never a pause as long as it.
		slow.set(dg, pace{chunk: 16 << 10, interval: 400 * time.Millisecond})
		e.pull(t, slowReg+"/"+repo+":1")
		wait(t, slow.served, dg, "the slow layer sent whole")
	})

	t.Run("stalled mirror", func(t *testing.T) {
		repo := "stall/mirror-" + e.suffix
		img := image(repo)
		dg := layerDigest(t, img)
		slow.set(dg, pace{stall: true})
		want, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		if id := e.pull(t, "registry.k8s.io/"+repo+":1"); id != want.String() {
			t.Errorf("pulled %s, want %s", id, want)
		}
	})

	t.Run("stalled registry", func(t *testing.T) {
		repo := "stall/registry-" + e.suffix
		dg := layerDigest(t, image(repo))
		slow.set(dg, pace{stall: true})
		ref := slowReg + "/" + repo + ":1"
		_, err := e.cli.PullImage(imageTestCtx(t), &runtime.PullImageRequest{Image: &runtime.ImageSpec{Image: ref}})
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no progress") || !strings.Contains(err.Error(), ref) {
			t.Fatalf("pull from a stalled registry: %v, want DeadlineExceeded naming the image and no progress", err)
		}
		if img := e.status(t, ref); img != nil {
			t.Errorf("a cancelled pull left image %v", img)
		}
	})

}
