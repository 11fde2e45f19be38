// Package registry serves go-containerregistry's registry (in memory,
// plain HTTP) in the test process on a free port of 127.0.0.1, for the
// suites that pull images (test/e2e, test/conformance/run). The engine
// pulls from 127.0.0.0/8 over plain HTTP without any configuration.
package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

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
}

// Start serves a new, empty registry. logf gets the error that ends
// serving early, if any.
func Start(logf func(format string, args ...any)) (*Registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r := &Registry{
		Host: l.Addr().String(),
		srv: &http.Server{
			Handler:           ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))),
			ReadHeaderTimeout: 30 * time.Second,
		},
		done: make(chan struct{}),
	}
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
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return nil
}
