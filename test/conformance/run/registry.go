package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/cri-compose/cri-compose/test/images/critest"
	"github.com/cri-compose/cri-compose/test/registry"
)

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

// pushMirrored pushes img to reg under the mirror path of each of its
// names; names that share a path (registry.k8s.io/pause:3.9 and
// k8s.gcr.io/pause:3.9) are pushed once.
func pushMirrored(ctx context.Context, reg *registry.Registry, img critest.Image) error {
	var archive bytes.Buffer
	if _, err := img.Archive(&archive); err != nil {
		return fmt.Errorf("image %s: %w", img.Refs[0], err)
	}
	var paths []string
	pushed := map[string]bool{}
	for _, ref := range img.Refs {
		p, err := mirrorPath(ref)
		if err != nil {
			return err
		}
		if !pushed[p] {
			pushed[p] = true
			paths = append(paths, p)
		}
	}
	if err := reg.PushArchive(ctx, archive.Bytes(), paths...); err != nil {
		return fmt.Errorf("image %s: %w", img.Refs[0], err)
	}
	return nil
}
