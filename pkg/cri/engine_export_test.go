package cri

import (
	"context"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// NewFakeServer is a server on an engine and event stream of the test's
// (dockertest's), not running: the test calls Resync and HandleEvent.
// Its streaming server's listener closes with stop.
func NewFakeServer(cfg Config, d Engine, ev EventSource) (s *Server, stop func()) {
	s = newServer(cfg, d, ev)
	return s, func() {
		s.stream.stop()
		if s.stream.lis != nil {
			s.stream.lis.Close() // never served: stop closes only a serving one
		}
	}
}

// Resync is what the server does at every (re)connection to the engine.
func Resync(ctx context.Context, s *Server) { s.resync(ctx) }

// HandleEvent applies one engine event.
func HandleEvent(ctx context.Context, s *Server, ev dockerapi.Event) { s.handleEvent(ctx, ev) }

// Synced: the server holds every pod of the engine.
func Synced(s *Server) bool { return s.store.Synced() }

// ProjectDir is the folder of a pod's project.
func ProjectDir(s *Server, project string) string { return s.hostInfo().ProjectDir(project) }
