package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/cri-compose/cri-compose/test/images/critest"
	"github.com/cri-compose/cri-compose/test/registry"
)

// pushMirrored pushes img to reg under the mirror path of each of its
// names (registry.PushMirrored).
func pushMirrored(ctx context.Context, reg *registry.Registry, img critest.Image) error {
	var archive bytes.Buffer
	if _, err := img.Archive(&archive); err != nil {
		return fmt.Errorf("image %s: %w", img.Refs[0], err)
	}
	return reg.PushMirrored(ctx, archive.Bytes(), img.Refs...)
}
