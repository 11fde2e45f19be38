package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
)

// Run is one test process's footprint on the machine: its ID (RunID)
// names what it creates, its folder Dir (<tmp>/<prefix>-<ID>-*) holds its
// pid, and what its set-up made is undone at its end, last first. A later
// run of the same suite tells a live run's leftovers from a dead one's
// (killed, timed out) by that pid: Alive, SweepDirs.
type Run struct {
	Prefix string
	ID     string
	Dir    string

	mu   sync.Mutex
	undo []func()
	keep bool // Keep: the folder outlives Cleanup
}

// NewRun makes the run's folder and writes the pid in it. Its removal is
// the first thing deferred, so it goes last: what a suite keeps in it
// (logs, state) is there for every other undo step.
func NewRun(prefix string) (*Run, error) {
	r := &Run{Prefix: prefix, ID: RunID()}
	dir, err := os.MkdirTemp("", prefix+"-"+r.ID+"-")
	if err != nil {
		return nil, err
	}
	r.Dir = dir
	r.Defer(func() {
		r.mu.Lock()
		keep := r.keep
		r.mu.Unlock()
		if keep {
			fmt.Fprintf(os.Stderr, "%s: kept %s\n", prefix, dir)
			return
		}
		if err := RemoveTree(dir); err != nil { // what a test mounted in it goes too
			fmt.Fprintf(os.Stderr, "%s: cleanup: %v\n", prefix, err)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		r.Cleanup()
		return nil, err
	}
	return r, nil
}

// Keep leaves the run's folder for a look after the run: its removal, the
// last step of Cleanup, says where it is instead.
func (r *Run) Keep() {
	r.mu.Lock()
	r.keep = true
	r.mu.Unlock()
}

// Defer adds f to what Cleanup runs. Safe from any goroutine.
func (r *Run) Defer(f func()) {
	r.mu.Lock()
	r.undo = append(r.undo, f)
	r.mu.Unlock()
}

// Cleanup undoes the set-up, last step first. A second call (a signal
// handler's, then the normal end's) finds nothing left to do.
func (r *Run) Cleanup() {
	r.mu.Lock()
	undo := r.undo
	r.undo = nil
	r.mu.Unlock()
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i]()
	}
}

// Alive reports whether the run id of this suite is still running: one of
// its folders holds the pid of a live process, or was made so recently that
// its pid may not be written yet. This run is alive.
func (r *Run) Alive(id string) bool {
	if id == r.ID {
		return true
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), r.Prefix+"-"+id+"-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "pid"))
		if err != nil {
			if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) < time.Minute {
				return true
			}
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && syscall.Kill(pid, 0) == nil {
			return true
		}
	}
	return false
}

// SweepDirs removes the folders of this suite's dead runs and returns
// their ids, for the suite to remove what else they made (containers,
// networks, images named after them).
func (r *Run) SweepDirs() []string {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), r.Prefix+"-*-*"))
	var dead []string
	seen := map[string]bool{}
	for _, d := range dirs {
		id, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), r.Prefix+"-"), "-")
		if r.Alive(id) {
			continue
		}
		_ = os.RemoveAll(d)
		if !seen[id] {
			seen[id] = true
			dead = append(dead, id)
		}
	}
	return dead
}

// Setup is what a suite's TestMain prepares first, and what each test
// checks before it begins: the run, the repository and the machine's
// engine. Skip is what a developer's machine may lack (the engine,
// busybox): the tests skip, or fail in CI. Err is anything else: the tests
// fail with it.
type Setup struct {
	*Run
	Repo   string
	Engine *dockerapi.Client
	Skip   string
	Err    error
}

// NewSetup makes the run (NewRun) and connects to the engine; Cleanup
// closes it. When it cannot, Err or Skip says why and the suite's own
// set-up stops there (Ready).
func NewSetup(prefix string) *Setup {
	s := &Setup{}
	if s.Run, s.Err = NewRun(prefix); s.Err != nil {
		s.Run = &Run{Prefix: prefix, ID: RunID()}
		return s
	}
	if s.Repo, s.Err = RepoRoot(); s.Err != nil {
		return s
	}
	if s.Engine, s.Skip, s.Err = images.Connect(); s.Err != nil {
		return s
	}
	e := s.Engine
	s.Defer(func() { e.Close() })
	return s
}

// Ready tells whether nothing so far stops the tests.
func (s *Setup) Ready() bool { return s.Err == nil && s.Skip == "" }

// Fail records err as what stops the tests.
func (s *Setup) Fail(err error) { s.Err = err }

// Need makes t fail or skip when the set-up could not prepare the run.
func (s *Setup) Need(t testing.TB) {
	t.Helper()
	if s.Err != nil {
		t.Fatalf("%s setup: %v", s.Prefix, s.Err)
	}
	if s.Skip != "" {
		images.SkipOrFail(t, "%s", s.Skip)
	}
}
