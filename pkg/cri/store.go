package cri

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// sandboxRec is what the store knows of one pod sandbox. Records are values:
// a change replaces the whole record, and only store.refresh makes one.
type sandboxRec struct {
	ID        string
	Project   string
	Config    *runtime.PodSandboxConfig
	CreatedAt int64
	State     runtime.PodSandboxState
	IP        string
	Pid       int
	Service   types.ServiceConfig
	Network   string
}

// containerRec is what the store knows of one CRI container.
type containerRec struct {
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

	State      runtime.ContainerState
	StartedAt  int64
	FinishedAt int64
	ExitCode   int32
	Reason     string
	Message    string
	Pid        int

	ServiceCfg types.ServiceConfig
}

// store answers every read from memory. It is filled from the engine (the
// only source of truth) at start and kept current by the event stream and by
// the handlers after each write, always through refresh.
type store struct {
	docker  *dockerapi.Client
	network string
	// projectsDir is <StateDir>/projects: the server owns the pods whose
	// project lives there (com.docker.compose.project.working_dir), and
	// only those, so several cri-compose instances can share one engine
	// without adopting (and pumping the logs of) each other's pods.
	// Empty: every pod on the engine.
	projectsDir string

	// synced is set once a resync has read every pod and container from
	// the engine: until then the store may be missing pods that exist.
	synced atomic.Bool
	// syncedCh is closed when synced is first set.
	syncedCh   chan struct{}
	syncedOnce sync.Once
	// readAll is set (by the Run goroutine only) when a resync has read
	// every container of the engine.
	readAll bool

	mu         sync.RWMutex
	sandboxes  map[string]sandboxRec
	containers map[string]containerRec
	// ooms counts the engine's "oom" events per container: the engine's
	// own OOMKilled flag can be lost when the exit is handled before the
	// OOM notification (noteOOM).
	ooms map[string]uint64

	// locks serialise inspect+apply per object, so an older inspect can
	// never overwrite a newer one.
	locks [64]sync.Mutex

	// onChange is told of every container record that changed (for events).
	onChange func(old, cur *containerRec)
	// onSandboxChange is the same for sandbox records: created (nil old),
	// state changed, deleted (nil cur).
	onSandboxChange func(old, cur *sandboxRec)
	// beforeExit runs before an exited container is reported as such (the
	// log pump drains first).
	beforeExit func(r *containerRec)
}

func newStore(d *dockerapi.Client, network string) *store {
	return &store{docker: d, network: network, syncedCh: make(chan struct{}), sandboxes: map[string]sandboxRec{}, containers: map[string]containerRec{}}
}

func (s *store) lock(id string) func() {
	h := fnv.New32a()
	h.Write([]byte(id))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

// refresh re-reads one container from the engine and updates the store: the
// one place where records change.
func (s *store) refresh(ctx context.Context, id string) error {
	unlock := s.lock(id)
	defer unlock()
	in, err := s.docker.ContainerInspect(ctx, id)
	if dockerapi.IsNotFound(err) {
		s.delete(id)
		return nil
	}
	if err != nil {
		return err
	}
	obj, ours, err := sandbox.ParseLabels(in.Config.Labels)
	if !ours || !s.owns(in.Config.Labels) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("container %s: %w", id, err)
	}
	created := parseTime(in.Created)
	switch obj.Type {
	case sandbox.TypeSandbox:
		r := sandboxRec{ID: in.ID, Project: obj.Project, Config: obj.Sandbox, CreatedAt: created,
			State: runtime.PodSandboxState_SANDBOX_NOTREADY, Network: s.network,
			Service: sandbox.Service(sandbox.InfraService, in.Config, in.HostConfig)}
		if in.State != nil && in.State.Running {
			r.State = runtime.PodSandboxState_SANDBOX_READY
			r.Pid = in.State.Pid
		}
		if in.NetworkSettings != nil {
			if ep := in.NetworkSettings.Networks[s.network]; ep != nil && ep.IPAddress.IsValid() {
				r.IP = ep.IPAddress.String()
			}
		}
		s.mu.Lock()
		old, had := s.sandboxes[r.ID]
		s.sandboxes[r.ID] = r
		s.mu.Unlock()
		if s.onSandboxChange != nil && (!had || old.State != r.State) {
			if had {
				s.onSandboxChange(&old, &r)
			} else {
				s.onSandboxChange(nil, &r)
			}
		}
	case sandbox.TypeContainer:
		r := containerRec{ID: in.ID, SandboxID: obj.SandboxID, Project: obj.Project, Service: obj.Service,
			Config: obj.Container, Image: obj.Image, ImageID: in.Image, LogPath: obj.LogPath, User: obj.User, Tty: in.Config.Tty,
			CreatedAt: created, ServiceCfg: sandbox.Service(obj.Service, in.Config, in.HostConfig)}
		applyState(&r, in.State)
		if r.State == runtime.ContainerState_CONTAINER_EXITED && r.Reason != "OOMKilled" && s.oomEvents(r.ID) > 0 {
			// The kernel's OOM killer killed a process of it (as containerd,
			// whatever the exit code: the main process may have been the
			// one that reported its child's death).
			r.Reason = "OOMKilled"
		}
		if r.State == runtime.ContainerState_CONTAINER_EXITED && s.beforeExit != nil {
			s.beforeExit(&r)
		}
		s.mu.Lock()
		old, had := s.containers[r.ID]
		s.containers[r.ID] = r
		s.mu.Unlock()
		if s.onChange != nil && (!had || old.State != r.State) {
			if had {
				s.onChange(&old, &r)
			} else {
				s.onChange(nil, &r)
			}
		}
	}
	return nil
}

func (s *store) delete(id string) {
	s.mu.Lock()
	oldSb, hadSb := s.sandboxes[id]
	delete(s.sandboxes, id)
	old, had := s.containers[id]
	delete(s.containers, id)
	delete(s.ooms, id)
	s.mu.Unlock()
	if had && s.onChange != nil {
		s.onChange(&old, nil)
	}
	if hadSb && s.onSandboxChange != nil {
		s.onSandboxChange(&oldSb, nil)
	}
}

// noteOOM counts an "oom" event of container id. The caller refreshes
// the container after: an exit already applied becomes OOMKilled.
func (s *store) noteOOM(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.containers[id]; !ok {
		return // not ours (another instance's), or gone
	}
	if s.ooms == nil {
		s.ooms = map[string]uint64{}
	}
	s.ooms[id]++
}

// oomEvents is the number of "oom" events seen for container id.
func (s *store) oomEvents(id string) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ooms[id]
}

// applyState maps the engine's state to CRI's.
func applyState(r *containerRec, st *container.State) {
	r.State = runtime.ContainerState_CONTAINER_UNKNOWN
	if st == nil {
		return
	}
	r.Pid = st.Pid
	r.StartedAt = parseTime(st.StartedAt)
	r.FinishedAt = parseTime(st.FinishedAt)
	if r.FinishedAt != 0 && r.FinishedAt < r.StartedAt {
		// The engine stamps the start when runc returns and the exit when
		// containerd saw it: a quick process can finish "before" it started.
		r.FinishedAt = r.StartedAt
	}
	r.ExitCode = int32(st.ExitCode)
	switch st.Status {
	case container.StateCreated:
		r.State = runtime.ContainerState_CONTAINER_CREATED
		if st.Error != "" { // the start failed: it will never run
			r.State = runtime.ContainerState_CONTAINER_EXITED
			r.Reason, r.Message = "StartError", st.Error
			if r.ExitCode == 0 {
				r.ExitCode = 128
			}
			if r.FinishedAt == 0 {
				r.FinishedAt = r.CreatedAt
			}
		}
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		r.State = runtime.ContainerState_CONTAINER_RUNNING
		r.FinishedAt = 0
	case container.StateExited, container.StateDead, container.StateRemoving:
		r.State = runtime.ContainerState_CONTAINER_EXITED
		switch {
		case st.OOMKilled:
			r.Reason = "OOMKilled"
		case st.ExitCode == 0:
			r.Reason = "Completed"
		default:
			r.Reason = "Error"
		}
		r.Message = st.Error
	}
}

// parseTime turns an engine timestamp into Unix nanoseconds (0 for unset).
func parseTime(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1970 {
		return 0
	}
	return t.UnixNano()
}

// resync re-reads every container of ours and every one the store holds, so
// nothing missed while the stream was down stays wrong or stays listed.
func (s *store) resync(ctx context.Context) error {
	list, err := s.docker.ContainerList(ctx, sandbox.LabelType)
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	for _, c := range list {
		ids[c.ID] = true
	}
	s.mu.RLock()
	for id := range s.sandboxes {
		ids[id] = true
	}
	for id := range s.containers {
		ids[id] = true
	}
	s.mu.RUnlock()
	// Sandboxes first, so containers never point at an unknown pod.
	var sbs, ctrs []string
	for _, c := range list {
		if !s.owns(c.Labels) {
			delete(ids, c.ID) // another instance's
			continue
		}
		if c.Labels[sandbox.LabelType] == sandbox.TypeSandbox {
			sbs = append(sbs, c.ID)
			delete(ids, c.ID)
		}
	}
	for id := range ids {
		ctrs = append(ctrs, id)
	}
	var firstErr error
	for _, id := range append(sbs, ctrs...) {
		if err := s.refresh(ctx, id); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	// Every pod was read (one that could not be is logged by the caller
	// and must not keep the runtime from ever being ready).
	s.readAll = true
	return firstErr
}

// markSynced says the store holds every pod of the engine, once the first
// resync that read them all has also finished its clean-ups.
func (s *store) markSynced() {
	if !s.readAll {
		return
	}
	s.synced.Store(true)
	s.syncedOnce.Do(func() { close(s.syncedCh) })
}

// owns reports whether the container with labels belongs to this server's
// state dir (see projectsDir).
func (s *store) owns(labels map[string]string) bool {
	if s.projectsDir == "" {
		return true
	}
	wd := labels[sandbox.LabelWorkingDir]
	return wd != "" && sameDir(filepath.Dir(wd), s.projectsDir)
}

func sameDir(a, b string) bool {
	if a == b {
		return true
	}
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}

// waitSynced holds a read until the store has been filled from the engine
// once, so that a client that did not wait for Status (a script, a person
// with crictl) is never told right after a restart that pods are gone.
func (s *store) waitSynced(ctx context.Context) error {
	if s.synced.Load() {
		return nil
	}
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-s.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("the runtime is still reading pods from the engine: %w", errUnavailable)
	}
}

// lookup helpers accept a full id or a unique prefix, as crictl users type.

func (s *store) sandbox(id string) (sandboxRec, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return byIDOrPrefix(s.sandboxes, id, "pod sandbox")
}

func (s *store) container(id string) (containerRec, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return byIDOrPrefix(s.containers, id, "container")
}

// byIDOrPrefix finds the record of id, or of the one id that starts with it.
func byIDOrPrefix[R any](recs map[string]R, id, kind string) (R, error) {
	if r, ok := recs[id]; ok {
		return r, nil
	}
	var found []R
	if id != "" {
		for k, r := range recs {
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
		return zero, fmt.Errorf("%s %q: %w", kind, id, errNotFound)
	}
	return zero, fmt.Errorf("%s id prefix %q is ambiguous: %w", kind, id, errNotFound)
}

// Records are big (each holds its compose service config: about 1.7 KB),
// so the store hands out few copies: the hot paths (the list and stats
// handlers, the stats sampler) walk the records in place with eachSandbox
// and eachContainer and keep only what they need; listSandboxes and
// listContainers copy every record, once, in order. At 500 pods, copying
// and sorting whole records was most of what a list cost (BENCHMARKS.md).

// eachSandbox calls f with every sandbox record, in no order, under the
// store's read lock: f must be quick and must not call the store. Records
// are passed by value, copied on the stack: a copy on the heap would cost
// write barriers while the GC runs.
func (s *store) eachSandbox(f func(r sandboxRec)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range s.sandboxes {
		f(r)
	}
}

// eachContainer is eachSandbox for container records.
func (s *store) eachContainer(f func(r containerRec)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range s.containers {
		f(r)
	}
}

// newestFirst orders records by creation, newest first (then by id, so
// that the order is stable).
type recKey struct {
	created int64
	id      string
}

func newestFirst(a, b recKey) int {
	if c := cmp.Compare(b.created, a.created); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// listSandboxes copies every sandbox record, newest first.
func (s *store) listSandboxes() []sandboxRec {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]recKey, 0, len(s.sandboxes))
	for id, r := range s.sandboxes {
		keys = append(keys, recKey{r.CreatedAt, id})
	}
	slices.SortFunc(keys, newestFirst)
	out := make([]sandboxRec, len(keys))
	for i, k := range keys {
		out[i] = s.sandboxes[k.id]
	}
	return out
}

// listContainers copies every container record, newest first.
func (s *store) listContainers() []containerRec {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := make([]recKey, 0, len(s.containers))
	for id, r := range s.containers {
		keys = append(keys, recKey{r.CreatedAt, id})
	}
	slices.SortFunc(keys, newestFirst)
	out := make([]containerRec, len(keys))
	for i, k := range keys {
		out[i] = s.containers[k.id]
	}
	return out
}

// containersOf copies the container records of one sandbox, newest first.
func (s *store) containersOf(sandboxID string) []containerRec {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var keys []recKey
	for id, r := range s.containers {
		if r.SandboxID == sandboxID {
			keys = append(keys, recKey{r.CreatedAt, id})
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.SortFunc(keys, newestFirst)
	out := make([]containerRec, len(keys))
	for i, k := range keys {
		out[i] = s.containers[k.id]
	}
	return out
}
