package staging

import (
	"context"
	"io"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// Engine is what staging asks of the container engine: named volumes, and
// a short-lived container that mounts one to copy into.
type Engine interface {
	VolumeCreate(ctx context.Context, name string, labels map[string]string) error
	VolumeList(ctx context.Context, labels ...string) (map[string]map[string]string, error)
	VolumeRemove(ctx context.Context, name string) error
	ContainerCreate(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig) (string, error)
	ContainerRemove(ctx context.Context, id string) error
	CopyToContainer(ctx context.Context, id, dir string, tar io.Reader) error
}

var _ Engine = (*dockerapi.Client)(nil)
