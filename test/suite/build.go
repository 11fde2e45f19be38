package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cri-compose/cri-compose/test/toolcache"
)

var builds struct {
	sync.Mutex
	dir  string
	once map[string]func() (string, error)
}

// Binary builds ./cmd/<cmd> of the repository once per test process (with
// -race if race) and returns its path; Main removes it at the end. Suites
// pass RaceEnabled, or false for a binary that measurements or a slow
// host must not have slowed.
func Binary(cmd string, race bool) (string, error) {
	key := fmt.Sprintf("%s-race=%v", cmd, race)
	builds.Lock()
	if builds.once == nil {
		builds.once = map[string]func() (string, error){}
	}
	f, ok := builds.once[key]
	if !ok {
		f = sync.OnceValues(func() (string, error) { return build(cmd, race) })
		builds.once[key] = f
	}
	builds.Unlock()
	return f()
}

func build(cmd string, race bool) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	builds.Lock()
	if builds.dir == "" {
		builds.dir, err = os.MkdirTemp("", "cc-bin-")
	}
	dir := builds.dir
	builds.Unlock()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, cmd)
	args := []string{"build", "-o", out}
	if race {
		out += "-race"
		args = []string{"build", "-race", "-o", out}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := toolcache.Go(ctx, root, append(args, "./cmd/"+cmd)...); err != nil {
		return "", err
	}
	return out, nil
}

func removeBinaries() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir = ""
		builds.once = nil
	}
}
