// Package registry serves go-containerregistry's registry (in memory,
// plain HTTP) in the test process on a free port of 127.0.0.1, for the
// suites that pull images (test/e2e, test/conformance/run). The engine
// pulls from 127.0.0.0/8 over plain HTTP without any configuration.
package registry

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Registry is a running registry.
type Registry struct {
	Host string // "127.0.0.1:PORT"
	srv  *http.Server
	done chan struct{}
	auth authn.Authenticator // what PushArchive logs in with
	// listen is the address served on (OnAllAddresses).
	listen string
}

// OnAllAddresses serves on every address of the host, so that an engine
// in another network namespace (a second host) pulls from it at one of
// the host's addresses; Host stays 127.0.0.1:port, which an engine treats
// as an insecure registry without being told.
func OnAllAddresses() Option {
	return func(r *Registry) { r.listen = "0.0.0.0:0" }
}

// Port is the port the registry serves on.
func (r *Registry) Port() string {
	_, p, _ := net.SplitHostPort(r.Host)
	return p
}

// Option changes how Start serves.
type Option func(*Registry)

// WithBasicAuth makes every request need HTTP basic auth with user and
// password, as a private registry does: without them the answer is 401
// with a Basic challenge, which the engine answers with the credentials
// of the pull (X-Registry-Auth).
func WithBasicAuth(user, password string) Option {
	return func(r *Registry) {
		next := r.srv.Handler
		r.auth = &authn.Basic{Username: user, Password: password}
		r.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			u, p, ok := req.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="test registry"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
			next.ServeHTTP(w, req)
		})
	}
}

// Start serves a new, empty registry. logf gets the error that ends
// serving early, if any.
func Start(logf func(format string, args ...any), opts ...Option) (*Registry, error) {
	r := &Registry{
		srv: &http.Server{
			Handler:           ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))),
			ReadHeaderTimeout: 30 * time.Second,
		},
		done:   make(chan struct{}),
		auth:   authn.Anonymous,
		listen: "127.0.0.1:0",
	}
	for _, o := range opts {
		o(r)
	}
	l, err := net.Listen("tcp", r.listen)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("registry: %v", err)
		}
	}()
	return r, nil
}

// Close stops serving, and waits until it has.
func (r *Registry) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		r.srv.Close()
	}
	<-r.done
}

// PushArchive pushes the single image of a `docker save` archive to the
// registry under each of repos (paths with a tag, like "e2e/busybox:1.0").
func (r *Registry) PushArchive(ctx context.Context, archive []byte, repos ...string) error {
	img, err := tarball.Image(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(archive)), nil
	}, nil)
	if err != nil {
		return fmt.Errorf("read image archive: %w", err)
	}
	for _, repo := range repos {
		ref, err := name.NewTag(r.Host+"/"+repo, name.Insecure, name.StrictValidation)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuth(r.auth)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return nil
}

// MirrorPath is where a mirror serves an image: the reference's path and
// tag without its registry host, as cri-compose's --registry-mirror maps
// them (registry.k8s.io/e2e-test-images/busybox:1.29-2 and
// gcr.io/k8s-staging-cri-tools/test-image-1:latest become
// e2e-test-images/busybox:1.29-2 and k8s-staging-cri-tools/test-image-1:latest).
func MirrorPath(ref string) (string, error) {
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", ref, err)
	}
	return t.RepositoryStr() + ":" + t.TagStr(), nil
}

// PushMirrored pushes the image of archive under the mirror path of each
// of refs, so that a runtime mirroring their registries to r pulls it by
// those names. Names that share a path (registry.k8s.io/pause:3.9 and
// k8s.gcr.io/pause:3.9) are pushed once.
func (r *Registry) PushMirrored(ctx context.Context, archive []byte, refs ...string) error {
	var paths []string
	pushed := map[string]bool{}
	for _, ref := range refs {
		p, err := MirrorPath(ref)
		if err != nil {
			return err
		}
		if !pushed[p] {
			pushed[p] = true
			paths = append(paths, p)
		}
	}
	if err := r.PushArchive(ctx, archive, paths...); err != nil {
		return fmt.Errorf("image %s: %w", refs[0], err)
	}
	return nil
}
