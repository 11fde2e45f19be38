package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

func (s *Store) lock(id string) func() {
	h := fnv.New32a()
	h.Write([]byte(id))
	m := &s.locks[h.Sum32()%uint32(len(s.locks))]
	m.Lock()
	return m.Unlock
}

var _ Engine = (*dockerapi.Client)(nil)

// Refresh re-reads one container from the engine and updates the store: a
// container new to the store is added (its labels parsed, once), a known
// one has its status replaced, a gone one is deleted.
func (s *Store) Refresh(ctx context.Context, id string) error {
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
	if _, ok := s.sandboxes.lookup(in.ID); ok {
		st := sandboxStatus(in, s.opts.Network)
		return s.updateSandbox(in.ID, func(SandboxStatus) SandboxStatus { return st })
	}
	if c, ok := s.containers.lookup(in.ID); ok {
		st := s.containerStatus(in, c.ContainerMetadata)
		return s.updateContainer(in.ID, func(ContainerStatus) ContainerStatus { return st })
	}
	return s.add(in)
}

// add parses a container's labels into the metadata of a new entry.
func (s *Store) add(in container.InspectResponse) error {
	obj, ours, err := sandbox.ParseLabels(in.Config.Labels)
	if !ours || !s.Owns(in.Config.Labels) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("container %s: %w", in.ID, err)
	}
	created := parseTime(in.Created)
	switch obj.Type {
	case sandbox.TypeSandbox:
		md := &SandboxMetadata{ID: in.ID, Project: obj.Project, Config: obj.Sandbox, CreatedAt: created, Network: s.opts.Network}
		return s.AddSandbox(md, sandboxStatus(in, s.opts.Network))
	case sandbox.TypeContainer:
		md := &ContainerMetadata{ID: in.ID, SandboxID: obj.SandboxID, Project: obj.Project, Service: obj.Service,
			Config: obj.Container, Image: obj.Image, ImageID: in.Image, LogPath: obj.LogPath, User: obj.User, Tty: in.Config.Tty,
			CreatedAt: created}
		return s.AddContainer(md, s.containerStatus(in, md))
	}
	return nil
}

// sandboxStatus is a sandbox's status as the engine reports its infra
// container.
func sandboxStatus(in container.InspectResponse, network string) SandboxStatus {
	svc := sandbox.Service(sandbox.InfraService, in.Config, in.HostConfig)
	st := sandboxState(in.State)
	st.Service = &svc
	if in.NetworkSettings != nil {
		if ep := in.NetworkSettings.Networks[network]; ep != nil {
			if ep.IPAddress.IsValid() {
				st.IP = ep.IPAddress.String()
			}
			if ep.GlobalIPv6Address.IsValid() {
				st.IPv6 = ep.GlobalIPv6Address.String()
			}
		}
	}
	return st
}

// containerStatus is a container's status as the engine reports it. An
// exited one's pump drains first (Options.BeforeExit).
func (s *Store) containerStatus(in container.InspectResponse, md *ContainerMetadata) ContainerStatus {
	svc := sandbox.Service(md.Service, in.Config, in.HostConfig)
	st := applyState(in.State, md.CreatedAt)
	st.ServiceCfg = &svc
	if st.State != exited {
		return st
	}
	if st.Reason != reasonOOMKilled && s.OOMEvents(md.ID) > 0 {
		// The kernel's OOM killer killed a process of it (as containerd,
		// whatever the exit code: the main process may have been the one
		// that reported its child's death).
		st.Reason = reasonOOMKilled
	}
	if s.opts.BeforeExit != nil {
		s.opts.BeforeExit(Container{md, st})
	}
	return st
}

// NoteOOM counts an "oom" event of container id. The caller refreshes
// the container after: an exit already applied becomes OOMKilled.
func (s *Store) NoteOOM(id string) {
	// Held across the lookup: a delete in between would leave a count.
	s.oomMu.Lock()
	defer s.oomMu.Unlock()
	if _, ok := s.containers.lookup(id); !ok {
		return // not ours (another instance's), or gone
	}
	s.ooms[id]++
}

// OOMEvents is the number of "oom" events seen for container id.
func (s *Store) OOMEvents(id string) uint64 {
	s.oomMu.Lock()
	defer s.oomMu.Unlock()
	return s.ooms[id]
}

// Resync re-reads every container of ours and every one the store holds,
// so nothing missed while the stream was down stays wrong or stays listed.
// readAll says every pod was read: one that could not be is in err, and
// must not keep the runtime from ever being ready (MarkSynced).
func (s *Store) Resync(ctx context.Context) (readAll bool, err error) {
	list, err := s.docker.ContainerList(ctx, sandbox.LabelType)
	if err != nil {
		return false, err
	}
	ids := map[string]bool{}
	for _, c := range list {
		ids[c.ID] = true
	}
	for _, id := range s.sandboxes.ids() {
		ids[id] = true
	}
	for _, id := range s.containers.ids() {
		ids[id] = true
	}
	// Sandboxes first, so containers never point at an unknown pod.
	var sbs, ctrs []string
	for _, c := range list {
		if !s.Owns(c.Labels) {
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
		if err := s.Refresh(ctx, id); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return true, firstErr
}

// MarkSynced says the store holds every pod of the engine: call it once a
// Resync that read them all has also finished its clean-ups.
func (s *Store) MarkSynced() {
	s.synced.Store(true)
	s.syncedOnce.Do(func() { close(s.syncedCh) })
}

// Synced reports whether MarkSynced was called.
func (s *Store) Synced() bool { return s.synced.Load() }

// WaitSynced holds a read until the store has been filled from the engine
// once, so that a client that did not wait for Status (a script, a person
// with crictl) is never told right after a restart that pods are gone.
func (s *Store) WaitSynced(ctx context.Context) error {
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
		return fmt.Errorf("the runtime is still reading pods from the engine: %w", ErrUnavailable)
	}
}

// Owns reports whether the container with labels belongs to this server's
// state dir (Options.ProjectsDir).
func (s *Store) Owns(labels map[string]string) bool {
	if s.opts.ProjectsDir == "" {
		return true
	}
	wd := labels[sandbox.LabelWorkingDir]
	return wd != "" && sameDir(filepath.Dir(wd), s.opts.ProjectsDir)
}

func sameDir(a, b string) bool {
	if a == b {
		return true
	}
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == bb
}
