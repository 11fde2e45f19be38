package cri

import "time"

// Test hooks of the stats sampler and the container event hub, for the
// integration tests (package cri_test).

// StatsFromEngine makes s take every stats sample from the engine's
// streams and every writable layer size from the engine's list, as with a
// remote engine.
func StatsFromEngine(s *Server) { s.stats.UseEngineOnly() }

// SetLayerMaxAge changes how often writable layers are measured again.
func SetLayerMaxAge(s *Server, d time.Duration) { s.stats.SetLayerMaxAge(d) }

// EventSubscribers is how many GetContainerEvents streams s serves.
func EventSubscribers(s *Server) int { return int(s.cevents.n.Load()) }

// StatsPass runs one sampling pass now and says how long it took.
func StatsPass(s *Server) time.Duration {
	start := time.Now()
	s.stats.Pass()
	return time.Since(start)
}
