package images

import (
	"context"
	"io"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/api/types/system"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// Engine is what the image store asks of the container engine.
type Engine interface {
	Info(ctx context.Context) (system.Info, error)
	ImageInspect(ctx context.Context, ref string) (image.InspectResponse, error)
	ImageList(ctx context.Context, reference string) ([]image.Summary, error)
	ImagePull(ctx context.Context, ref string, auth *registry.AuthConfig, progress func(dockerapi.PullProgress)) error
	ImageRemove(ctx context.Context, ref string, force bool) error
	ImageTag(ctx context.Context, src, target string) error
}

// FileEngine is what reading images' files asks of the container engine:
// a short-lived container of the image to copy from.
type FileEngine interface {
	// IsLocal: the engine runs on this host, so an exported image can be
	// bind-mounted from here.
	IsLocal() bool
	ImageInspect(ctx context.Context, ref string) (image.InspectResponse, error)
	ContainerCreate(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig) (string, error)
	ContainerList(ctx context.Context, labels ...string) ([]container.Summary, error)
	ContainerRemove(ctx context.Context, id string) error
	ContainerExport(ctx context.Context, id string) (io.ReadCloser, error)
	CopyFromContainer(ctx context.Context, id, path string) (io.ReadCloser, error)
}

var (
	_ Engine     = (*dockerapi.Client)(nil)
	_ FileEngine = (*dockerapi.Client)(nil)
)
