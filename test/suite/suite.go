// Package suite holds what the TestMain of the end-to-end suites (test/e2e,
// test/vk) does alike before its own set-up: a run id, the repository
// root, and the engine, which a developer's machine may lack (the tests
// then skip, or fail in CI).
package suite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// RunID is a short random id for the names a run makes, so that runs on
// one engine (or leftovers of killed ones) never meet.
func RunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RepoRoot is the repository, two folders above the suite's (test/<suite>,
// go test's working directory), checked by its cmd/<cmd>.
func RepoRoot(cmd string) (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", cmd)); err != nil {
		return "", fmt.Errorf("repository root not found from the test's folder: %w", err)
	}
	return root, nil
}

// Engine connects to the engine at DOCKER_HOST or the default socket and
// pings it. When none answers, skip says so (and how to start one); the
// client is returned either way, for the caller to close.
func Engine() (c *dockerapi.Client, skip string, err error) {
	c, err = dockerapi.New("")
	if err != nil {
		return nil, "", fmt.Errorf("docker client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		skip = fmt.Sprintf("no Docker engine answers at %s (bash hack/ensure-docker.sh starts one): %v", c.Host(), err)
	}
	return c, skip, nil
}
