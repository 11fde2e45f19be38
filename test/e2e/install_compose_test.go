package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// TestInstallCompose: `make install-compose`'s command puts the Compose v2
// the tests use into a plugin folder as a file of its own (no link into
// the tool cache, which may be cleaned), and the docker CLI then runs it
// as `docker compose`.
func TestInstallCompose(t *testing.T) {
	if composeV2Err != nil {
		images.SkipOrFail(t, "no docker compose v2: %v", composeV2Err)
	}
	t.Parallel()
	cfg := t.TempDir()
	dir := filepath.Join(cfg, "cli-plugins")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, toolcache.GoBin(), "run", "./test/toolcache/install-compose", "-dir", dir)
	cmd.Dir = repoRoot
	cmd.Env = toolcache.DockerEnv(cfg)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install-compose: %v\n%s", err, out)
	}
	plugin := filepath.Join(dir, "docker-compose")
	fi, err := os.Lstat(plugin)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %s, want a regular file 0755", plugin, fi.Mode())
	}
	if !strings.Contains(string(out), "installed "+plugin+": Docker Compose version") {
		t.Errorf("install-compose said %q, want it to name %s and the version docker compose reports", out, plugin)
	}
	bin, _, err := toolcache.Compose(ctx, repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	want, err := exec.CommandContext(ctx, bin, "version", "--short").Output()
	if err != nil {
		t.Fatal(err)
	}
	got, err := dockerE("", "docker", "--config", cfg, "compose", "version", "--short")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Errorf("docker compose version %q from the installed plugin, want %q", got, want)
	}
}
