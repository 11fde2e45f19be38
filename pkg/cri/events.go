package cri

import (
	"context"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// resync runs when the engine stream (re)connects: prepare the engine,
// rebuild the store from it, restart log pumps and rewrite compose files.
// This is also the whole of restart recovery: the engine is the database.
func (s *Server) resync(ctx context.Context) {
	conn := s.events.Connection()
	defer func() { s.resyncedConn.Store(conn) }()
	// Prepare again on every (re)connection: an engine that restarted may
	// have lost the pod network or the pause image.
	s.unprepare()
	if !s.events.Connected() { // first Resync of a subscription comes before the stream
		if _, err := s.docker.Ping(ctx); err != nil {
			return
		}
	}
	// The pod network may have other options than ours (other flags
	// before a restart): compared once it is there.
	s.netRecheck.Store(true)
	if err := s.prepare(ctx); err != nil {
		klog.ErrorS(err, "Engine answers but cannot be prepared for pods")
	} else {
		s.checkPodNetwork(ctx, false)
	}
	readAll, err := s.store.Resync(ctx)
	if err != nil {
		klog.ErrorS(err, "Resync with the engine was incomplete")
	}
	for _, c := range s.store.Containers(nil) {
		s.ensurePump(ctx, c)
	}
	// The sweeps remove what belongs to no pod of the store, so they run
	// only when the store holds every pod. After a list or an inspect that
	// failed (an engine restarting, a restart of ours against a slow
	// engine), a pod missing from the store is one not read, not one gone,
	// and its project folder holds files its containers mount. What a pod
	// really gone left waits for the next complete resync.
	if readAll && err == nil {
		s.sweepProjects(ctx)
		s.files.Sweep(ctx)
		if s.hostInfo().StageMounts { // staged volumes of pods gone: pkg/cri/staging
			live := map[string]bool{}
			for _, sb := range s.store.Sandboxes(nil) {
				live[sb.Project] = true
			}
			s.stage.Sweep(ctx, live)
		}
	}
	// Ready only now, so nobody sees the state dir before the sweep.
	if readAll {
		s.store.MarkSynced()
	}
	nsb, nctr := s.store.Len()
	klog.V(1).InfoS("Resynced with the engine", "sandboxes", nsb, "containers", nctr)
}

// handleEvent applies one engine event to the store.
func (s *Server) handleEvent(ctx context.Context, ev dockerapi.Event) {
	// A container event carries the container's labels: a pod of another
	// runtime on the same engine (another state dir) is left alone before
	// it costs an inspect, which on a slow engine would hold up our own.
	if ev.Attributes[sandbox.LabelType] == "" || !s.store.Owns(ev.Attributes) {
		return // not ours
	}
	switch ev.Action {
	case "create", "start", "die", "destroy", "oom", "pause", "unpause", "rename", "update":
	default:
		return // exec_*, attach, kill, stop and friends change nothing CRI reports
	}
	if ev.Action == "oom" {
		s.store.NoteOOM(ev.ID)
	}
	if err := s.store.Refresh(ctx, ev.ID); err != nil {
		klog.V(2).InfoS("Refresh after engine event failed", "container", ev.ID, "action", ev.Action, "err", err)
	}
}

// ensurePump keeps a log pump on a container that has one to feed.
func (s *Server) ensurePump(ctx context.Context, c containerRec) {
	if c.LogPath == "" || c.StartedAt == 0 { // never started: nothing to read yet
		return
	}
	s.pumps.ensure(ctx, c.ID, c.LogPath, c.Tty, c.Pid, s.runningFn(c.ID))
}

func (s *Server) runningFn(id string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		in, err := s.docker.ContainerInspect(ctx, id)
		return err == nil && in.State != nil && in.State.Running
	}
}

// sweepProjects rewrites the compose file of every pod and removes project
// folders whose pod is gone (left by a crash between steps).
func (s *Server) sweepProjects(ctx context.Context) {
	for _, sb := range s.store.Sandboxes(nil) {
		if err := s.writeProject(sb.ID); err != nil {
			klog.ErrorS(err, "Cannot write compose file", "project", sb.Project)
		}
	}
	dir := filepath.Join(s.cfg.StateDir, "projects")
	// List the folders with them locked (as writeProject locks them), and
	// the live pods after that: a folder listed was written after its pod
	// entered the store, so a RunPodSandbox racing with this sweep keeps
	// its new folder.
	_ = s.projects.locked(func() error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil
		}
		live := map[string]bool{}
		for _, sb := range s.store.Sandboxes(nil) {
			live[sb.Project] = true
		}
		for _, e := range entries {
			// A RunPodSandbox in flight may have written its folder
			// before its infra container exists.
			if s.projects.creating[e.Name()] {
				continue
			}
			if !live[e.Name()] {
				klog.V(1).InfoS("Removing the folder of a project with no pod", "project", e.Name())
				_ = os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		return nil
	})
}
