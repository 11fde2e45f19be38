// Package store is what the CRI server knows of its pod sandboxes and
// containers, held in memory so that reads cost no engine call. The engine
// is the only source of truth: the store is filled from it at start
// (Resync) and kept current by Refresh, after each engine event and each
// handler's write.
//
// Each entry splits what never changes from what does, as containerd's CRI
// stores do: its metadata is parsed once from the container's labels (which
// the engine never changes) when the entry is added, and shared by every
// copy of the entry; its status changes only through update.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrNotFound, ErrExists and ErrUnavailable mark the store's own errors:
// no such entry, an entry of that id already, and not filled from the
// engine yet.
var (
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already in the store")
	ErrUnavailable = errors.New("unavailable")
)

// SandboxMetadata is what never changes of a pod sandbox.
type SandboxMetadata struct {
	ID        string
	Project   string
	Config    *runtime.PodSandboxConfig
	CreatedAt int64
	Network   string
}

// SandboxStatus is what changes of a pod sandbox.
type SandboxStatus struct {
	State runtime.PodSandboxState
	// IP and IPv6 are the pod's addresses on the pod network, per family
	// (a dual-stack network gives both).
	IP   string
	IPv6 string
	Pid  int
	// Service is the infra container as a compose service, rendered from
	// the engine's config of it: shared, read-only.
	Service *types.ServiceConfig
}

// Sandbox is one pod sandbox: its metadata and its status at one moment.
// Entries are values; the metadata they point to is shared and read-only.
type Sandbox struct {
	*SandboxMetadata
	SandboxStatus
}

// ContainerMetadata is what never changes of a CRI container.
type ContainerMetadata struct {
	ID        string
	SandboxID string
	Project   string
	Service   string
	Config    *runtime.ContainerConfig
	Image     string // as requested
	ImageID   string
	LogPath   string
	User      string // sandbox.LabelUser: who it runs as, "" when unresolved
	Tty       bool
	CreatedAt int64
}

// ContainerStatus is what changes of a CRI container.
type ContainerStatus struct {
	State      runtime.ContainerState
	StartedAt  int64
	FinishedAt int64
	ExitCode   int32
	Reason     string
	Message    string
	Pid        int
	// ServiceCfg is the container as a compose service, rendered from the
	// engine's config of it (UpdateContainerResources changes it): shared,
	// read-only.
	ServiceCfg *types.ServiceConfig
}

// Container is one CRI container: its metadata and its status at one
// moment, a value as Sandbox is.
type Container struct {
	*ContainerMetadata
	ContainerStatus
}

func (m *SandboxMetadata) key() (int64, string)   { return m.CreatedAt, m.ID }
func (m *ContainerMetadata) key() (int64, string) { return m.CreatedAt, m.ID }

func (r Sandbox) status() SandboxStatus                     { return r.SandboxStatus }
func (r Sandbox) withStatus(st SandboxStatus) Sandbox       { r.SandboxStatus = st; return r }
func (r Container) status() ContainerStatus                 { return r.ContainerStatus }
func (r Container) withStatus(st ContainerStatus) Container { r.ContainerStatus = st; return r }

// Options wire a store to the rest of the server.
type Options struct {
	// Network is the pod network, whose address is a sandbox's IP.
	Network string
	// ProjectsDir is <StateDir>/projects: the server owns the pods whose
	// project lives there (com.docker.compose.project.working_dir), and
	// only those, so several cri-compose instances can share one engine
	// without adopting (and pumping the logs of) each other's pods.
	// Empty: every pod on the engine.
	ProjectsDir string

	// OnContainer is told of every container entry that was added (nil
	// old), changed state, or was deleted (nil cur). It runs under the
	// entry's lock, so the calls for one container come in order.
	OnContainer func(old, cur *Container)
	// OnSandbox is OnContainer for sandboxes.
	OnSandbox func(old, cur *Sandbox)
	// BeforeExit runs before an exited container is reported as such (the
	// log pump drains first).
	BeforeExit func(c Container)
}

// Engine is what the store reads from the engine: one container, and
// every container with a label. *dockerapi.Client is the real one, and
// pkg/dockerapi/dockertest fakes it, so that recovery is unit-tested
// without Docker. Errors are dockerapi's (dockerapi.IsNotFound says gone).
type Engine interface {
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerList(ctx context.Context, labels ...string) ([]container.Summary, error)
}

// Store answers every read from memory.
type Store struct {
	docker Engine
	opts   Options

	// synced is set once a resync has read every pod and container from
	// the engine: until then the store may be missing pods that exist.
	synced atomic.Bool
	// syncedCh is closed when synced is first set.
	syncedCh   chan struct{}
	syncedOnce sync.Once

	sandboxes  table[Sandbox, SandboxStatus]
	containers table[Container, ContainerStatus]

	oomMu sync.Mutex
	// ooms counts the engine's "oom" events per container: the engine's
	// own OOMKilled flag can be lost when the exit is handled before the
	// OOM notification (NoteOOM).
	ooms map[string]uint64

	// locks serialise inspect+apply per entry, so an older inspect can
	// never overwrite a newer one.
	locks [64]sync.Mutex
}

// New makes an empty store that reads the engine through d (nil: a store
// filled by hand, for benchmarks).
func New(d Engine, o Options) *Store {
	return &Store{docker: d, opts: o, syncedCh: make(chan struct{}),
		sandboxes:  table[Sandbox, SandboxStatus]{kind: "pod sandbox", recs: map[string]Sandbox{}},
		containers: table[Container, ContainerStatus]{kind: "container", recs: map[string]Container{}},
		ooms:       map[string]uint64{}}
}

// AddSandbox records a new sandbox; its metadata is fixed from now on, so
// an id the store holds already is refused (ErrExists) and kept as it is.
func (s *Store) AddSandbox(md *SandboxMetadata, st SandboxStatus) error {
	cur := Sandbox{md, st}
	if err := s.sandboxes.insert(md.ID, cur); err != nil {
		return err
	}
	if s.opts.OnSandbox != nil {
		s.opts.OnSandbox(nil, &cur)
	}
	return nil
}

// AddContainer records a new container, as AddSandbox does a sandbox.
func (s *Store) AddContainer(md *ContainerMetadata, st ContainerStatus) error {
	cur := Container{md, st}
	if err := s.containers.insert(md.ID, cur); err != nil {
		return err
	}
	if s.opts.OnContainer != nil {
		s.opts.OnContainer(nil, &cur)
	}
	return nil
}

// updateSandbox is the one place a sandbox's status changes.
func (s *Store) updateSandbox(id string, f func(SandboxStatus) SandboxStatus) error {
	old, cur, err := s.sandboxes.update(id, f)
	if err == nil && s.opts.OnSandbox != nil && old.State != cur.State {
		s.opts.OnSandbox(&old, &cur)
	}
	return err
}

// updateContainer is the one place a container's status changes.
func (s *Store) updateContainer(id string, f func(ContainerStatus) ContainerStatus) error {
	old, cur, err := s.containers.update(id, f)
	if err == nil && s.opts.OnContainer != nil && old.State != cur.State {
		s.opts.OnContainer(&old, &cur)
	}
	return err
}

func (s *Store) delete(id string) {
	oldSb, hadSb := s.sandboxes.remove(id)
	old, had := s.containers.remove(id)
	s.oomMu.Lock()
	delete(s.ooms, id)
	s.oomMu.Unlock()
	if had && s.opts.OnContainer != nil {
		s.opts.OnContainer(&old, nil)
	}
	if hadSb && s.opts.OnSandbox != nil {
		s.opts.OnSandbox(&oldSb, nil)
	}
}

// Lookups accept a full id or a unique prefix, as crictl users type.

// Sandbox is the sandbox of id.
func (s *Store) Sandbox(id string) (Sandbox, error) { return s.sandboxes.get(id) }

// Container is the container of id.
func (s *Store) Container(id string) (Container, error) { return s.containers.get(id) }

// EachSandbox calls f with every sandbox, in no order, under the store's
// read lock: f must be quick and must not call the store. The hot paths
// (the list handlers, the stats sampler) walk the entries in place with it
// and keep only what they need.
func (s *Store) EachSandbox(f func(r Sandbox)) { s.sandboxes.each(f) }

// EachContainer is EachSandbox for containers.
func (s *Store) EachContainer(f func(r Container)) { s.containers.each(f) }

// Sandboxes copies the sandboxes that keep accepts (nil: all), newest first.
func (s *Store) Sandboxes(keep func(Sandbox) bool) []Sandbox { return s.sandboxes.list(keep) }

// Containers copies the containers that keep accepts (nil: all), newest
// first.
func (s *Store) Containers(keep func(Container) bool) []Container {
	return s.containers.list(keep)
}

// ContainersOf copies the containers of one sandbox, newest first.
func (s *Store) ContainersOf(sandboxID string) []Container {
	return s.containers.list(func(c Container) bool { return c.SandboxID == sandboxID })
}

// NewestFirst orders entries by creation, newest first, then by id, so
// that the order is stable.
func NewestFirst(aCreated int64, aID string, bCreated int64, bID string) int {
	if c := cmp.Compare(bCreated, aCreated); c != 0 {
		return c
	}
	return strings.Compare(aID, bID)
}

// entry is what a table holds: a value with fixed metadata (key) and a
// status S.
type entry[R, S any] interface {
	key() (created int64, id string)
	status() S
	withStatus(S) R
}

// table is one kind of entry, by id.
type table[R entry[R, S], S any] struct {
	kind string
	mu   sync.RWMutex
	recs map[string]R
}

func (t *table[R, S]) insert(id string, r R) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, had := t.recs[id]; had {
		return fmt.Errorf("%s %q: %w", t.kind, id, ErrExists)
	}
	t.recs[id] = r
	return nil
}

func (t *table[R, S]) update(id string, f func(S) S) (old, cur R, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.recs[id]
	if !ok {
		return old, old, fmt.Errorf("%s %q: %w", t.kind, id, ErrNotFound)
	}
	cur = old.withStatus(f(old.status()))
	t.recs[id] = cur
	return old, cur, nil
}

func (t *table[R, S]) remove(id string) (old R, had bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, had = t.recs[id]
	delete(t.recs, id)
	return old, had
}

// lookup is the entry whose whole id is id.
func (t *table[R, S]) lookup(id string) (R, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.recs[id]
	return r, ok
}

// get finds the entry of id, or of the one id that starts with it.
func (t *table[R, S]) get(id string) (R, error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if r, ok := t.recs[id]; ok {
		return r, nil
	}
	var found []R
	if id != "" {
		for k, r := range t.recs {
			if strings.HasPrefix(k, id) {
				found = append(found, r)
			}
		}
	}
	var zero R
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return zero, fmt.Errorf("%s %q: %w", t.kind, id, ErrNotFound)
	}
	return zero, fmt.Errorf("%s id prefix %q is ambiguous: %w", t.kind, id, ErrNotFound)
}

func (t *table[R, S]) each(f func(R)) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, r := range t.recs {
		f(r)
	}
}

func (t *table[R, S]) ids() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.recs))
	for id := range t.recs {
		out = append(out, id)
	}
	return out
}

// list copies the entries keep accepts (nil: all), newest first.
func (t *table[R, S]) list(keep func(R) bool) []R {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]R, 0, len(t.recs))
	for _, r := range t.recs {
		if keep == nil || keep(r) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b R) int {
		ac, aid := a.key()
		bc, bid := b.key()
		return NewestFirst(ac, aid, bc, bid)
	})
	return out
}

// Len is the number of sandboxes and of containers.
func (s *Store) Len() (sandboxes, containers int) {
	s.sandboxes.mu.RLock()
	sandboxes = len(s.sandboxes.recs)
	s.sandboxes.mu.RUnlock()
	s.containers.mu.RLock()
	containers = len(s.containers.recs)
	s.containers.mu.RUnlock()
	return sandboxes, containers
}
