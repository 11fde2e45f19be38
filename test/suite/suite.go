// Package suite is the harness every test suite shares: it builds the
// binaries once per test process (with -race when the tests run with it),
// runs a process (start, restart, stop, log tail), runs cri-compose as a
// process (Daemon) or a cri.Server in-process behind gRPC (StartServer),
// waits for a runtime to report ready, polls for a condition (Eventually),
// and mounts small filesystems (Tmpfs). A suite's TestMain calls Main, so
// that what the run built is removed.
package suite

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// RunID is this test process's short random id, for the names a run
// makes, so that runs on one engine (or leftovers of killed ones) never
// meet.
var RunID = sync.OnceValue(func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
})

// RepoRoot is the repository: the nearest folder above the test's working
// directory that holds cmd/cri-compose.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "cmd", "cri-compose")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("repository root (with cmd/cri-compose) not found above the test's folder")
		}
		dir = parent
	}
}

// Main runs the tests and then removes the binaries Binary built; call it
// from TestMain (os.Exit(suite.Main(m))).
func Main(m *testing.M) int {
	code := m.Run()
	removeBinaries()
	return code
}
