package cri

import (
	"context"
	"io"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/cri-compose/cri-compose/pkg/cri/images"
	"github.com/cri-compose/cri-compose/pkg/cri/staging"
	"github.com/cri-compose/cri-compose/pkg/cri/stats"
	"github.com/cri-compose/cri-compose/pkg/cri/store"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
)

// Engine is everything the runtime asks of the container engine: what the
// handlers call, and what the packages beside them (store, stats, images,
// staging) and the pause image do. *dockerapi.Client is the real one; a
// fake (pkg/dockerapi/dockertest) stands in for it where a unit test needs
// no Docker. Every method is dockerapi's, with its error kinds.
type Engine interface {
	store.Engine
	stats.Engine
	images.Engine
	images.FileEngine
	staging.Engine
	pause.Engine

	// Where the engine is and what it speaks.
	Host() string
	APIVersion() string
	AtLeast(version string) bool
	SharesFilesystem() bool
	Ping(ctx context.Context) (string, error)

	// The pod network.
	EnsureNetwork(ctx context.Context, name string, spec dockerapi.NetworkSpec) (string, error)
	NetworkInspect(ctx context.Context, name string) (dockerapi.NetworkSpec, int, error)
	NetworkRemove(ctx context.Context, name string) error

	// Containers' lives and streams.
	ContainerStart(ctx context.Context, id string) error
	ContainerStop(ctx context.Context, id string, timeout time.Duration) error
	ContainerKill(ctx context.Context, id, signal string) error
	ContainerUpdate(ctx context.Context, id string, res *container.Resources) error
	ContainerResize(ctx context.Context, id string, height, width uint) error
	ContainerAttach(ctx context.Context, id string, cfg dockerapi.AttachConfig) (*dockerapi.Stream, error)
	ContainerLogs(ctx context.Context, id string, since time.Time, follow bool) (io.ReadCloser, error)
	ContainerLogTail(ctx context.Context, id string, since time.Time, tail int) (io.ReadCloser, error)
	ContainerCreate(ctx context.Context, name string, cfg *container.Config, hc *container.HostConfig, nc *network.NetworkingConfig) (string, error)

	// Exec.
	ExecCreate(ctx context.Context, id string, cfg dockerapi.ExecConfig) (string, error)
	ExecAttach(ctx context.Context, execID string, tty bool) (*dockerapi.Stream, error)
	ExecInspect(ctx context.Context, execID string) (dockerapi.ExecState, error)
	ExecResize(ctx context.Context, execID string, height, width uint) error
}

// EventSource is the engine's event stream as the server follows it
// (*dockerapi.Events): Subscribe's first event asks for a resync, and so
// does every reconnection.
type EventSource interface {
	Run(ctx context.Context)
	Subscribe(ctx context.Context) <-chan dockerapi.Event
	// Connected: the stream is up now.
	Connected() bool
	// Connection counts the stream's connections: a resync that began on
	// the current one leaves the store current.
	Connection() uint64
}

var (
	_ Engine      = (*dockerapi.Client)(nil)
	_ EventSource = (*dockerapi.Events)(nil)
)
