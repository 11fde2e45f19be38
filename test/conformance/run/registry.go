package main

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

	"github.com/cri-compose/cri-compose/test/images/critest"
)

// registry is go-containerregistry's registry (in memory, plain HTTP) served
// in this process on a free port of 127.0.0.1. The engine pulls from
// 127.0.0.0/8 over plain HTTP without any configuration.
type registry struct {
	host string // "127.0.0.1:PORT"
	srv  *http.Server
	done chan struct{}
}

func startRegistry() (*registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	r := &registry{
		host: l.Addr().String(),
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

func (r *registry) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		r.srv.Close()
	}
	<-r.done
}

// mirrorPath is where the mirror serves an image: the reference's path and
// tag without its registry host, as cri-compose's --registry-mirror maps
// them (registry.k8s.io/e2e-test-images/busybox:1.29-2 and
// gcr.io/k8s-staging-cri-tools/test-image-1:latest become
// e2e-test-images/busybox:1.29-2 and k8s-staging-cri-tools/test-image-1:latest).
func mirrorPath(ref string) (string, error) {
	t, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", ref, err)
	}
	return t.RepositoryStr() + ":" + t.TagStr(), nil
}

// push pushes img to the registry under the mirror path of each of its
// names; names that share a path (registry.k8s.io/pause:3.9 and
// k8s.gcr.io/pause:3.9) are pushed once.
func (r *registry) push(ctx context.Context, img critest.Image) error {
	var archive bytes.Buffer
	if _, err := img.Archive(&archive); err != nil {
		return fmt.Errorf("image %s: %w", img.Refs[0], err)
	}
	v1img, err := tarball.Image(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(archive.Bytes())), nil
	}, nil)
	if err != nil {
		return fmt.Errorf("image %s: %w", img.Refs[0], err)
	}
	pushed := map[string]bool{}
	for _, ref := range img.Refs {
		p, err := mirrorPath(ref)
		if err != nil {
			return err
		}
		if pushed[p] {
			continue
		}
		pushed[p] = true
		dst, err := name.NewTag(r.host+"/"+p, name.Insecure, name.StrictValidation)
		if err != nil {
			return err
		}
		if err := remote.Write(dst, v1img, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("push %s: %w", dst, err)
		}
	}
	return nil
}
