package e2e

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

// testRegistry is go-containerregistry's registry (memory-backed, plain
// HTTP) served in process on a free port of 127.0.0.1, which the engine
// pulls from without any configuration.
type testRegistry struct {
	Host string // "127.0.0.1:PORT"
	srv  *http.Server
	done chan struct{}
}

func startRegistry() (*testRegistry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &testRegistry{
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
			log.Printf("e2e: test registry: %v", err)
		}
	}()
	return r, nil
}

func (r *testRegistry) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		r.srv.Close()
	}
	<-r.done
}

// pushArchive pushes the single image of a `docker save` archive to this
// registry under each of repos (paths with a tag, like "e2e/busybox:1.0").
func (r *testRegistry) pushArchive(ctx context.Context, archive []byte, repos ...string) error {
	img, err := tarball.Image(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(archive)), nil
	}, nil)
	if err != nil {
		return fmt.Errorf("read image archive: %w", err)
	}
	for _, repo := range repos {
		ref, err := name.ParseReference(r.Host+"/"+repo, name.Insecure, name.StrictValidation)
		if err != nil {
			return err
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
	}
	return nil
}
