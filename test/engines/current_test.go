// Package engines_test runs cri-compose's engine client against Docker
// Engines other than the machine's.
package engines_test

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/privengine"
)

// EnvCurrent asks for TestCurrentEngine (make test-engine-current sets it):
// its first run on a machine builds dockerd and containerd, many
// CPU-minutes, which `make test` does not spend.
const EnvCurrent = "CRI_COMPOSE_ENGINE_CURRENT"

// minCurrentAPI is the least Engine API a current engine must speak: 1.47
// (Docker 27.3) brought the newest feature the suites test (CDI device
// requests), and Docker 29 speaks more.
const minCurrentAPI = "1.47"

// TestCurrentEngine builds (or takes from the tool cache) a current Docker
// Engine, starts it privately, and checks through pkg/dockerapi that it
// answers with a new enough API and runs a busybox container whose output
// is read back.
func TestCurrentEngine(t *testing.T) {
	if v := os.Getenv(EnvCurrent); v == "" || v == "0" {
		t.Skipf("set %s=1 to build and run a current Docker Engine (make test-engine-current)", EnvCurrent)
	}
	pe := privengine.Start(t, privengine.Options{Current: true})
	bins := pe.Binaries()
	if pe.Built() > 0 {
		t.Logf("cold build of dockerd %s, containerd %s, its shim and runc %s: %v", bins.DockerdVersion, bins.ContainerdVersion, bins.RuncVersion, pe.Built().Round(time.Second))
	} else {
		t.Logf("dockerd %s, containerd %s and runc %s from the tool cache", bins.DockerdVersion, bins.ContainerdVersion, bins.RuncVersion)
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("dockerd log:\n%s\ncontainerd log:\n%s", pe.Log(), pe.ContainerdLog())
		}
	})

	c, err := dockerapi.New(pe.Host())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	api, err := c.Ping(ctx)
	if err != nil {
		t.Fatalf("ping: %v", err)
	}
	v, err := c.ServerVersion(ctx)
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	t.Logf("engine %s, API %s (negotiated %s), storage driver %s, containerd %s, runc %s, cgroup v%s (%s)",
		v.Version, v.APIVersion, c.APIVersion(), info.Driver, info.ContainerdCommit.ID, info.RuncCommit.ID, info.CgroupVersion, info.CgroupDriver)
	for _, w := range info.Warnings {
		t.Logf("engine warning: %s", w)
	}
	if !c.AtLeast(minCurrentAPI) {
		t.Fatalf("negotiated API %s (engine's %s, ping's %s), want at least %s", c.APIVersion(), v.APIVersion, api, minCurrentAPI)
	}

	const ref = "localhost/cri-compose/busybox:engine-current"
	images.NeedBusybox(t, c, ref)
	const line = "hello from a current engine"
	const label = "cri-compose.test=engine-current"
	k, val, _ := strings.Cut(label, "=")
	cfg := &container.Config{Image: ref, Cmd: []string{"echo", line}, Labels: map[string]string{k: val}}
	// The engine's own bridge is the pod network's road; this container
	// needs none.
	hc := &container.HostConfig{NetworkMode: "none"}
	if code := images.Run(t, c, cfg, hc, time.Minute); code != 0 {
		t.Fatalf("busybox echo exited %d", code)
	}
	list, err := c.ContainerList(ctx, label)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("%d containers labelled %s, want the one that ran", len(list), label)
	}
	rc, err := c.ContainerLogs(ctx, list[0].ID, time.Time{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var stdout, stderr strings.Builder
	if _, err := stdcopy.StdCopy(&stdout, &stderr, rc); err != nil {
		t.Fatalf("read logs: %v", err)
	}
	var got []string
	sc := bufio.NewScanner(strings.NewReader(stdout.String()))
	for sc.Scan() {
		// Each line starts with its timestamp (ContainerLogs asks for them).
		_, text, _ := strings.Cut(sc.Text(), " ")
		got = append(got, text)
	}
	if len(got) != 1 || got[0] != line || stderr.Len() != 0 {
		t.Fatalf("container output: stdout %q, stderr %q; want the one line %q", stdout.String(), stderr.String(), line)
	}
	t.Logf("the busybox container printed %q", got[0])
}
