package dockertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/system"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// APIVersion is the Engine API the fake speaks: the floor cri-compose
// supports (Docker 20.10), so version-gated features stay off.
const APIVersion = dockerapi.MinAPIVersion

// AddImage makes the engine hold an image under ref, with that id.
func (e *Engine) AddImage(ref, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	img := image.InspectResponse{ID: id, RepoTags: []string{ref}, Config: &dockerspec.DockerOCIImageConfig{}}
	e.images[ref], e.images[id] = img, img
}

// Containers are the engine's containers, by id.
func (e *Engine) Containers() map[string]container.InspectResponse {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.containers)
}

// Network is what a network was made with, and whether it exists.
func (e *Engine) Network(name string) (dockerapi.NetworkSpec, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n, ok := e.networks[name]
	return cloneSpec(n), ok
}

func cloneSpec(n dockerapi.NetworkSpec) dockerapi.NetworkSpec {
	n.Subnets, n.Labels = slices.Clone(n.Subnets), maps.Clone(n.Labels)
	return n
}

// Host is where the engine answers, for logs.
func (e *Engine) Host() string { return "fake://dockertest" }

// APIVersion is the API version negotiated with the engine.
func (e *Engine) APIVersion() string { return APIVersion }

// AtLeast reports whether the fake's API version is v or newer.
func (e *Engine) AtLeast(v string) bool { return dockerapi.APIAtLeast(APIVersion, v) }

// IsLocal: the fake stands for an engine on this host.
func (e *Engine) IsLocal() bool { return true }

// SharesFilesystem: host paths mean the same to it as to the caller.
func (e *Engine) SharesFilesystem() bool { return true }

// Ping answers with the API version.
func (e *Engine) Ping(context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpPing, ""); err != nil {
		return "", err
	}
	return APIVersion, nil
}

// Info describes a Docker 20.10 engine on Linux with cgroup v1, on this
// machine: its name is this host's.
func (e *Engine) Info(context.Context) (system.Info, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpInfo, ""); err != nil {
		return system.Info{}, err
	}
	host, _ := os.Hostname()
	return system.Info{Name: host, ServerVersion: "20.10.24", OSType: "linux", OperatingSystem: "dockertest",
		CgroupDriver: "cgroupfs", CgroupVersion: "1", DockerRootDir: "/var/lib/docker", Driver: "overlay2"}, nil
}

// EnsureNetwork makes the network unless it exists, and returns its id.
func (e *Engine) EnsureNetwork(_ context.Context, name string, spec dockerapi.NetworkSpec) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpNetwork, name); err != nil {
		return "", err
	}
	if _, ok := e.networks[name]; !ok {
		e.networks[name] = cloneSpec(spec)
	}
	return "net-" + name, nil
}

// NetworkInspect returns what the network was made with and how many
// containers are attached to it (by their NetworkMode, in any state).
func (e *Engine) NetworkInspect(_ context.Context, name string) (dockerapi.NetworkSpec, int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call("inspect network", name); err != nil {
		return dockerapi.NetworkSpec{}, 0, err
	}
	n, ok := e.networks[name]
	if !ok {
		return dockerapi.NetworkSpec{}, 0, &dockerapi.Error{Kind: dockerapi.KindNotFound, Op: "inspect network", Ref: name, Err: fmt.Errorf("network %s not found", name)}
	}
	attached := 0
	for _, c := range e.containers {
		if c.HostConfig != nil && string(c.HostConfig.NetworkMode) == name {
			attached++
		}
	}
	return cloneSpec(n), attached, nil
}

// NetworkRemove removes a network; missing is NotFound.
func (e *Engine) NetworkRemove(_ context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call("remove network", name); err != nil {
		return err
	}
	if _, ok := e.networks[name]; !ok {
		return &dockerapi.Error{Kind: dockerapi.KindNotFound, Op: "remove network", Ref: name, Err: fmt.Errorf("network %s not found", name)}
	}
	delete(e.networks, name)
	return nil
}

// ImageInspect finds an image AddImage added, by reference or id.
func (e *Engine) ImageInspect(_ context.Context, ref string) (image.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpImage, ref); err != nil {
		return image.InspectResponse{}, err
	}
	img, ok := e.images[ref]
	if !ok {
		return image.InspectResponse{}, &dockerapi.Error{Kind: dockerapi.KindNotFound, Op: OpImage, Ref: ref, Err: fmt.Errorf("no such image: %s", ref)}
	}
	return img, nil
}

// ImageLoad is refused: the fake reads no image archive (AddImage instead).
func (e *Engine) ImageLoad(context.Context, io.Reader) error {
	return &dockerapi.Error{Kind: dockerapi.KindInvalid, Op: "load image", Err: errors.New("dockertest loads no archive: use AddImage")}
}

// ContainerCreate creates a container as the Engine API does: a name
// taken is a Conflict, an image the engine lacks NotFound.
func (e *Engine) ContainerCreate(_ context.Context, name string, cfg *container.Config, hc *container.HostConfig, _ *network.NetworkingConfig) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpCreate, name); err != nil {
		return "", err
	}
	if _, taken := e.lookup(name); taken {
		return "", &dockerapi.Error{Kind: dockerapi.KindConflict, Op: OpCreate, Ref: name,
			Err: fmt.Errorf("the container name %q is already in use", "/"+name)}
	}
	if cfg != nil {
		if _, ok := e.images[cfg.Image]; !ok {
			return "", &dockerapi.Error{Kind: dockerapi.KindNotFound, Op: OpCreate, Ref: name, Err: fmt.Errorf("no such image: %s", cfg.Image)}
		}
	}
	return e.create(name, cfg, hc), nil
}

// ContainerStart starts a created or exited container with a new pid.
func (e *Engine) ContainerStart(_ context.Context, id string) error {
	e.mu.Lock()
	if err := e.call(OpStart, id); err != nil {
		e.mu.Unlock()
		return err
	}
	c, ok := e.lookup(id)
	if !ok {
		e.mu.Unlock()
		return noSuchContainer(OpStart, id)
	}
	e.pids++
	pid := e.pids
	e.mu.Unlock()
	if !c.State.Running {
		e.Start(c.ID, pid)
	}
	return nil
}

// ContainerStop ends a running container as if its stop signal worked
// (exit code 0); a stopped one is left as it is.
func (e *Engine) ContainerStop(_ context.Context, id string, _ time.Duration) error {
	e.mu.Lock()
	if err := e.call(OpStop, id); err != nil {
		e.mu.Unlock()
		return err
	}
	c, ok := e.lookup(id)
	e.mu.Unlock()
	if !ok {
		return noSuchContainer(OpStop, id)
	}
	if c.State.Running {
		e.Exit(c.ID, 0, false)
	}
	return nil
}

// ContainerRemove force-removes a container; missing is NotFound.
func (e *Engine) ContainerRemove(_ context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpRemove, id); err != nil {
		return err
	}
	c, ok := e.lookup(id)
	if !ok {
		return noSuchContainer(OpRemove, id)
	}
	delete(e.containers, c.ID)
	return nil
}

// Events is an event stream for a server under test, as pkg/dockerapi's
// shared stream behaves: every subscription begins with a Resync, and
// then carries what Send sends. It is connected from the start.
type Events struct {
	mu    sync.Mutex
	subs  []chan dockerapi.Event
	conns uint64
}

// NewEvents returns a connected stream.
func NewEvents() *Events { return &Events{conns: 1} }

// Run does nothing until ctx ends: the stream is always up.
func (e *Events) Run(ctx context.Context) { <-ctx.Done() }

// Subscribe returns the events from now on, a Resync first.
func (e *Events) Subscribe(ctx context.Context) <-chan dockerapi.Event {
	ch := make(chan dockerapi.Event, 64)
	ch <- dockerapi.Event{Resync: true}
	e.mu.Lock()
	e.subs = append(e.subs, ch)
	e.mu.Unlock()
	go func() {
		<-ctx.Done()
		e.mu.Lock()
		e.subs = slices.DeleteFunc(e.subs, func(c chan dockerapi.Event) bool { return c == ch })
		close(ch)
		e.mu.Unlock()
	}()
	return ch
}

// Send gives ev to every subscriber.
func (e *Events) Send(ev dockerapi.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ch := range e.subs {
		ch <- ev
	}
}

// Connected: always.
func (e *Events) Connected() bool { return true }

// Connection is the stream's connection count: one.
func (e *Events) Connection() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.conns
}
