package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/moby/moby/api/types/container"
)

// InCI reports whether the tests run under CI (CI set to anything but "",
// "0" or "false"). There a missing engine or tool fails a test instead of
// skipping it.
func InCI() bool {
	switch os.Getenv("CI") {
	case "", "0", "false", "FALSE", "False":
		return false
	}
	return true
}

// SkipOrFail skips t with the message, or fails it when InCI.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI is set, so this cannot be skipped: "+format, args...)
	}
	t.Skipf(format, args...)
}

// Connect connects to the engine at DOCKER_HOST or the default socket and
// pings it, for a suite's TestMain. When none answers, skip says so (and
// how to start one); the client is returned either way, for the caller to
// close.
func Connect() (c *dockerapi.Client, skip string, err error) {
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

// Engine returns a client of the engine at DOCKER_HOST or the default socket,
// closed when t ends. When no engine answers it skips t, or fails it in CI.
func Engine(t testing.TB) *dockerapi.Client {
	t.Helper()
	c, skip, err := Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if skip != "" {
		SkipOrFail(t, "%s", skip)
	}
	return c
}

// NeedBusybox loads the Busybox image tagged ref into c's engine. When the
// host has no static busybox it skips t, or fails it in CI.
func NeedBusybox(t testing.TB, c *dockerapi.Client, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := Busybox(ctx, c, ref)
	if errors.Is(err, ErrNoBusybox) {
		SkipOrFail(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Run creates a container from cfg and hc (hc may be nil), starts it, waits
// up to timeout for it to exit and returns its exit code. The container is
// removed when t ends.
func Run(t testing.TB, c *dockerapi.Client, cfg *container.Config, hc *container.HostConfig, timeout time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	if hc == nil {
		hc = &container.HostConfig{}
	}
	id, err := c.ContainerCreate(ctx, "", cfg, hc, nil)
	if err != nil {
		t.Fatalf("create container from %s: %v", cfg.Image, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.ContainerRemove(ctx, id); err != nil && !dockerapi.IsNotFound(err) {
			t.Logf("remove container %s: %v", id, err)
		}
	})
	if err := c.ContainerStart(ctx, id); err != nil {
		t.Fatalf("start container from %s: %v", cfg.Image, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.ContainerInspect(ctx, id)
		if err != nil {
			t.Fatalf("inspect container %s: %v", id, err)
		}
		if st.State != nil && !st.State.Running && st.State.Status != "created" {
			return st.State.ExitCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s from %s still runs after %v", id, cfg.Image, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
