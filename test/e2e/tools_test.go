package e2e

import (
	"context"
	"time"

	"github.com/cri-compose/cri-compose/test/toolcache"
)

// Tools that are slow to build (crictl, docker compose) are built once into
// the tool cache (test/toolcache: os.UserCacheDir()/cri-compose/tools) and
// reused by every later run: only the first run pays.

// buildCrictl returns crictl at the version the main go.mod requires,
// from the tool cache.
func buildCrictl(ctx context.Context) (string, time.Duration, error) {
	return toolcache.Crictl(ctx, repoRoot)
}

// buildCompose returns Docker Compose v2 at the version test/tools/go.mod
// requires, from the tool cache.
func buildCompose(ctx context.Context) (string, time.Duration, error) {
	return toolcache.Compose(ctx, repoRoot)
}

// installComposePlugin makes dockerConfig a DOCKER_CONFIG whose only content
// is the compose binary as the CLI plugin docker-compose, and checks that
// `docker compose version` runs it.
func installComposePlugin(ctx context.Context, dockerConfig, bin string) (string, error) {
	return toolcache.InstallComposePlugin(ctx, dockerConfig, bin)
}

// dockerEnv is the environment for docker and docker-compose commands: the
// test's DOCKER_CONFIG, and nothing that would pick another project.
func dockerEnv(dockerConfig string) []string { return toolcache.DockerEnv(dockerConfig) }
