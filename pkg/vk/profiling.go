package vk

import (
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
)

// WithProfiling serves Go's pprof profiles at /debug/pprof/ beside h, as
// kubelet's enableProfilingHandler does on its API: behind the same
// authentication, and authorized as nodes/proxy (auth.go), so only who
// may proxy to the node may profile it. With contention, blocking and
// mutex waits are sampled too (kubelet's enableContentionProfiling), at a
// cost on every lock; without it those two profiles are empty.
func WithProfiling(h http.Handler, contention bool) http.Handler {
	if contention {
		runtime.SetBlockProfileRate(1)
		runtime.SetMutexProfileFraction(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, block, mutex, allocs, threadcreate by name
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// Only /debug/pprof goes through the mux: h keeps its own path
	// handling (a ServeMux would clean and redirect paths first).
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/debug/pprof") {
			mux.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
