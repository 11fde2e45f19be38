// Package toolcache builds the slow-to-build tools that tests and
// benchmarks run (crictl, Docker Compose v2, a current Docker Engine,
// upstream BusyBox) once per machine into
// os.UserCacheDir()/cri-compose/tools/<name>-<version>, and installs
// Compose v2 as a Docker CLI plugin in a private DOCKER_CONFIG. test/e2e,
// test/bench, test/vk (its control plane and kubectl) and test/privengine
// share it.
package toolcache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ComposeModule is the module Compose v2 is built from; test/tools/go.mod
// pins its version.
const ComposeModule = "github.com/docker/compose/v5"

// Dir is the tool cache, created if needed. Without a user cache dir (no
// HOME) it is a folder of the temp dir.
func Dir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "cri-compose", "tools")
	return dir, os.MkdirAll(dir, 0o755)
}

// GoBin is the go command that builds the tools: the one on PATH, which is
// also what `go test` was (GOTOOLCHAIN picks the same toolchain for both).
func GoBin() string { return "go" }

// Go runs the go command in dir and returns its trimmed stdout.
func Go(ctx context.Context, dir string, args ...string) (string, error) {
	return goEnv(ctx, nil, dir, args...)
}

// goEnv is Go with env (KEY=value) added to the environment.
func goEnv(ctx context.Context, env []string, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, GoBin(), args...)
	cmd.Dir = dir
	// test/tools is a module of its own: no workspace may pull it into
	// another build list.
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ModuleVersion is the version of module mod in the build list of the
// module in dir (read from its go.mod, no network).
func ModuleVersion(ctx context.Context, dir, mod string) (string, error) {
	return Go(ctx, dir, "list", "-m", "-f", "{{.Version}}", mod)
}

// Cached returns the path of the tool binary name-version in the tool
// cache, building it with `go build [flags] -o … pkg` in module dir when it
// is not there yet. The build writes a temp file that is renamed into place,
// so concurrent runs never see half a binary. built tells whether this call
// built it, and took how long.
func Cached(ctx context.Context, dir, name, version, pkg string, flags ...string) (path string, built time.Duration, err error) {
	return CachedEnv(ctx, nil, dir, name, version, pkg, flags...)
}

// CachedEnv is Cached with env (KEY=value, e.g. CGO_ENABLED=0) added to the
// build's environment.
func CachedEnv(ctx context.Context, env []string, dir, name, version, pkg string, flags ...string) (path string, built time.Duration, err error) {
	return cached(ctx, env, []string{"build"}, dir, name, version, pkg, flags)
}

// CachedTest is Cached for the test binary of package pkg (`go test -c`),
// for a suite that runs as a program, such as Kubernetes' e2e.test.
func CachedTest(ctx context.Context, dir, name, version, pkg string, flags ...string) (path string, built time.Duration, err error) {
	return cached(ctx, nil, []string{"test", "-c"}, dir, name, version, pkg, flags)
}

func cached(ctx context.Context, env, verb []string, dir, name, version, pkg string, flags []string) (path string, built time.Duration, err error) {
	cache, err := Dir()
	if err != nil {
		return "", 0, fmt.Errorf("tool cache: %w", err)
	}
	path = filepath.Join(cache, name+"-"+version)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return path, 0, nil
	}
	tmp, err := os.CreateTemp(cache, "."+name+"-build-*")
	if err != nil {
		return "", 0, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	start := time.Now()
	args := append(append([]string{}, verb...), flags...)
	args = append(args, "-o", tmp.Name(), pkg)
	if _, err := goEnv(ctx, env, dir, args...); err != nil {
		return "", 0, fmt.Errorf("build %s %s: %w", name, version, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", 0, err
	}
	return path, time.Since(start), nil
}

// Crictl returns crictl at the version the main go.mod (in repoRoot)
// requires, from the tool cache.
func Crictl(ctx context.Context, repoRoot string) (string, time.Duration, error) {
	const mod = "sigs.k8s.io/cri-tools"
	v, err := ModuleVersion(ctx, repoRoot, mod)
	if err != nil {
		return "", 0, err
	}
	return Cached(ctx, repoRoot, "crictl", v, mod+"/cmd/crictl", "-ldflags=-s -w")
}

// Compose returns Docker Compose v2 at the version test/tools/go.mod (below
// repoRoot) requires, from the tool cache.
func Compose(ctx context.Context, repoRoot string) (string, time.Duration, error) {
	dir := filepath.Join(repoRoot, "test", "tools")
	v, err := ModuleVersion(ctx, dir, ComposeModule)
	if err != nil {
		return "", 0, err
	}
	return Cached(ctx, dir, "docker-compose", v, ComposeModule+"/cmd",
		"-ldflags=-s -w -X "+ComposeModule+"/internal.Version="+v)
}

// InstallComposePlugin makes dockerConfig a DOCKER_CONFIG whose only
// content is the compose binary as the CLI plugin docker-compose, checks
// that `docker compose version` runs it, and returns that version.
func InstallComposePlugin(ctx context.Context, dockerConfig, bin string) (string, error) {
	if _, err := PlaceComposePlugin(bin, filepath.Join(dockerConfig, "cli-plugins")); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "docker", "compose", "version", "--short")
	cmd.Env = DockerEnv(dockerConfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("docker compose version: %w: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// PlaceComposePlugin puts the compose binary into the docker CLI plugin
// folder dir as docker-compose, mode 0755, and returns its path. It is a
// hard link or a copy, not a symlink, so that it outlives a cleaned tool
// cache, and it is renamed into place, so that a docker CLI running
// meanwhile never sees half a binary.
func PlaceComposePlugin(bin, dir string) (path string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path = filepath.Join(dir, "docker-compose")
	tmp, err := os.CreateTemp(dir, ".docker-compose-*")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	tmp.Close()
	if os.Remove(tmp.Name()) == nil && os.Link(bin, tmp.Name()) == nil {
		return path, os.Rename(tmp.Name(), path)
	}
	// Another filesystem: a copy.
	in, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(tmp.Name(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	if _, err = io.Copy(out, in); err != nil {
		out.Close()
		return "", err
	}
	if err = out.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

// DockerEnv is the environment for docker and docker-compose commands: the
// given DOCKER_CONFIG, and nothing that would pick another project.
func DockerEnv(dockerConfig string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DOCKER_CONFIG" || strings.HasPrefix(k, "COMPOSE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "DOCKER_CONFIG="+dockerConfig)
}
