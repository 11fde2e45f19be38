package cri

import "context"

// OOMEvent applies an engine "oom" event of container id to s, as the
// event stream does.
func OOMEvent(ctx context.Context, s *Server, id string) error {
	s.store.NoteOOM(id)
	return s.store.Refresh(ctx, id)
}
