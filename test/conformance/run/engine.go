package main

import (
	"context"
	"strings"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// removeNames removes each image name of refs from the engine, so that
// critest's pull specs pull them through cri-compose and the mirror rather
// than find them. Forced: a name left by an interrupted run may still be
// used by a stopped container.
func removeNames(ctx context.Context, d *dockerapi.Client, refs []string) {
	var removed []string
	for _, ref := range refs {
		err := d.ImageRemove(ctx, ref, true)
		switch {
		case err == nil:
			removed = append(removed, ref)
		case dockerapi.IsNotFound(err):
		default:
			logf("engine: cannot remove image name %s: %v", ref, err)
		}
	}
	if len(removed) > 0 {
		logf("engine: removed image names %s", strings.Join(removed, " "))
	}
}

// removeRegistryImages removes the images that carry a name of the local
// registry host ("127.0.0.1:PORT/…"), in case the runtime kept one.
func removeRegistryImages(ctx context.Context, d *dockerapi.Client, host string) {
	imgs, err := d.ImageList(ctx, "")
	if err != nil {
		logf("engine: list images: %v", err)
		return
	}
	for _, img := range imgs {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, host+"/") {
				removeNames(ctx, d, []string{tag})
			}
		}
	}
}

// removeContainers force-removes the containers of this run's cri-compose:
// those whose Compose working dir lies in its state dir, and any other on
// its pod network.
func removeContainers(ctx context.Context, d *dockerapi.Client, stateDir, network string) {
	list, err := d.ContainerList(ctx)
	if err != nil {
		logf("engine: list containers: %v", err)
		return
	}
	n := 0
	for _, c := range list {
		ours := strings.HasPrefix(c.Labels[sandbox.LabelWorkingDir], stateDir+"/")
		if !ours && c.NetworkSettings != nil {
			_, ours = c.NetworkSettings.Networks[network]
		}
		if !ours {
			continue
		}
		if err := d.ContainerRemove(ctx, c.ID); err != nil && !dockerapi.IsNotFound(err) {
			logf("engine: remove container %s: %v", c.ID[:12], err)
			continue
		}
		n++
	}
	if n > 0 {
		logf("engine: removed %d leftover containers", n)
	}
}

// removeNetwork removes the pod network, retrying while the engine still
// detaches removed containers from it.
func removeNetwork(ctx context.Context, d *dockerapi.Client, network string) {
	var err error
	for i := 0; i < 10; i++ {
		err = d.NetworkRemove(ctx, network)
		if err == nil || dockerapi.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
	logf("engine: remove network %s: %v", network, err)
}
