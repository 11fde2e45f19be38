// Package dockertest is an engine in memory for unit tests of what reads
// and drives the engine through pkg/dockerapi: it holds containers, answers
// inspect and list as the Engine API does, and fails on demand with the
// errors pkg/dockerapi returns. It is for testing logic (mapping, error
// codes, recovery order); the real engine remains the proof that a feature
// works.
package dockertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/image"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// Operation names, as pkg/dockerapi names them in its errors and metrics.
const (
	OpInspect = "inspect container"
	OpList    = "list containers"
	OpCreate  = "create container"
	OpStart   = "start container"
	OpStop    = "stop container"
	OpRemove  = "remove container"
	OpPing    = "ping engine"
	OpInfo    = "engine info"
	OpNetwork = "create network"
	OpImage   = "inspect image"
)

// Engine is the fake. The zero value is not usable: call New.
type Engine struct {
	mu         sync.Mutex
	containers map[string]container.InspectResponse
	fail       map[string]map[string]error // op → id ("" for any) → error
	calls      []Call

	images   map[string]image.InspectResponse // by reference and by id
	networks map[string]dockerapi.NetworkSpec
	pids     int
}

// Call is one request the engine answered (or failed).
type Call struct {
	Op, ID string
}

// New returns an engine that holds no container.
func New() *Engine {
	return &Engine{containers: map[string]container.InspectResponse{}, fail: map[string]map[string]error{},
		images: map[string]image.InspectResponse{}, networks: map[string]dockerapi.NetworkSpec{}, pids: 1000}
}

// Create adds a container in state "created", as ContainerCreate would,
// and returns its id.
func (e *Engine) Create(name string, cfg *container.Config, hc *container.HostConfig) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.create(name, cfg, hc)
}

// create is Create, held under e.mu.
func (e *Engine) create(name string, cfg *container.Config, hc *container.HostConfig) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	if cfg == nil {
		cfg = &container.Config{}
	}
	e.containers[id] = container.InspectResponse{
		ID: id, Name: "/" + name, Created: time.Now().UTC().Format(time.RFC3339Nano), Image: "sha256:" + id,
		Config: cfg, HostConfig: hc,
		State: &container.State{Status: container.StateCreated},
	}
	return id
}

// Start marks a container running with pid, since now.
func (e *Engine) Start(id string, pid int) {
	e.update(id, func(st *container.State) {
		st.Status, st.Running, st.Pid = container.StateRunning, true, pid
		st.StartedAt = time.Now().UTC().Format(time.RFC3339Nano)
	})
}

// Exit marks a container exited with code, now, OOM-killed if oom.
func (e *Engine) Exit(id string, code int, oom bool) {
	e.update(id, func(st *container.State) {
		st.Status, st.Running, st.Pid, st.ExitCode, st.OOMKilled = container.StateExited, false, 0, code, oom
		st.FinishedAt = time.Now().UTC().Format(time.RFC3339Nano)
	})
}

func (e *Engine) update(id string, f func(*container.State)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.containers[id]
	if !ok {
		panic("dockertest: no container " + id)
	}
	st := *c.State
	f(&st)
	c.State = &st
	e.containers[id] = c
}

// Remove removes a container, as ContainerRemove with force would.
func (e *Engine) Remove(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.containers, id)
}

// Fail makes every later op on id (on any container with "") fail with
// err, wrapped as pkg/dockerapi wraps the engine's errors; nil clears it.
func (e *Engine) Fail(op, id string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail[op] == nil {
		e.fail[op] = map[string]error{}
	}
	if err == nil {
		delete(e.fail[op], id)
		return
	}
	e.fail[op][id] = err
}

// Calls are the requests answered so far, in order.
func (e *Engine) Calls() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

// call records a request and returns the error it must fail with, if any.
// Held under e.mu.
func (e *Engine) call(op, id string) error {
	e.calls = append(e.calls, Call{op, id})
	err := e.fail[op][id]
	if err == nil {
		err = e.fail[op][""]
	}
	if err == nil {
		return nil
	}
	return &dockerapi.Error{Kind: dockerapi.KindOf(err), Op: op, Ref: id, Err: err}
}

// ErrNotFound, ErrUnavailable and ErrConflict are engine errors of each
// kind, for Fail.
var (
	ErrNotFound    = &dockerapi.Error{Kind: dockerapi.KindNotFound, Op: "engine", Err: errors.New("no such object")}
	ErrUnavailable = &dockerapi.Error{Kind: dockerapi.KindUnavailable, Op: "engine", Err: errors.New("cannot connect to the Docker daemon")}
	ErrConflict    = &dockerapi.Error{Kind: dockerapi.KindConflict, Op: "engine", Err: errors.New("conflict")}
)

// ContainerInspect is the engine's inspect: NotFound for an unknown id.
func (e *Engine) ContainerInspect(_ context.Context, id string) (container.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpInspect, id); err != nil {
		return container.InspectResponse{}, err
	}
	c, ok := e.lookup(id)
	if !ok {
		return container.InspectResponse{}, noSuchContainer(OpInspect, id)
	}
	return c, nil
}

// lookup finds a container by id or name, as the Engine API does. Held
// under e.mu.
func (e *Engine) lookup(ref string) (container.InspectResponse, bool) {
	if c, ok := e.containers[ref]; ok {
		return c, true
	}
	for _, c := range e.containers {
		if c.Name == "/"+ref {
			return c, true
		}
	}
	return container.InspectResponse{}, false
}

func noSuchContainer(op, ref string) error {
	return &dockerapi.Error{Kind: dockerapi.KindNotFound, Op: op, Ref: ref, Err: fmt.Errorf("no such container: %s", ref)}
}

// ContainerList lists every container (running or not) carrying every
// label in labels ("key" or "key=value"), in no particular order.
func (e *Engine) ContainerList(_ context.Context, labels ...string) ([]container.Summary, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.call(OpList, ""); err != nil {
		return nil, err
	}
	var out []container.Summary
	for _, id := range slices.Sorted(maps.Keys(e.containers)) {
		c := e.containers[id]
		if !hasLabels(c.Config.Labels, labels) {
			continue
		}
		out = append(out, container.Summary{ID: c.ID, Names: []string{c.Name}, Image: c.Config.Image, ImageID: c.Image,
			Labels: c.Config.Labels, State: c.State.Status})
	}
	return out, nil
}

func hasLabels(have map[string]string, want []string) bool {
	for _, w := range want {
		k, v, withValue := strings.Cut(w, "=")
		got, ok := have[k]
		if !ok || withValue && got != v {
			return false
		}
	}
	return true
}
