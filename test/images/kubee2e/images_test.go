package kubee2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/images/critest"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// TestShells: the busybox stand-in's sh is busybox's, with its error
// messages, which the specs compare, and it passes on environment
// variables whose names are not shell identifiers, as upstream's does;
// agnhost's /bin/bash is bash, as upstream's Alpine image has; in
// glibc-dns-testing's, `hostname -f` names the container.
func TestShells(t *testing.T) {
	c := images.Engine(t)
	bash, err := BashStatic()
	if err != nil {
		images.SkipOrFail(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	busybox, _, err := toolcache.Busybox(ctx)
	if err != nil {
		images.SkipOrFail(t, "%v", err)
	}
	imgs, err := Images(Programs{Busybox: busybox, Agnhost: []byte("not run"), Bash: bash,
		Critest: critest.Programs{Webserver: []byte("not run"), NNP: []byte("not run"), Curl: []byte("not run")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		if img.Refs[0] != Busybox && img.Refs[0] != GlibcDNS && img.Refs[0] != Agnhost {
			continue
		}
		var archive bytes.Buffer
		if _, err := img.Archive(&archive); err != nil {
			t.Fatal(err)
		}
		if err := c.ImageLoad(ctx, &archive); err != nil {
			t.Fatalf("load %s: %v", img.Refs[0], err)
		}
		t.Cleanup(func() {
			for _, ref := range img.Refs {
				_ = c.ImageRemove(context.Background(), ref, true)
			}
		})
	}
	cfg := &container.Config{Image: Busybox, Cmd: []string{"sh", "-c",
		`test "$(sh -c 'echo x > /proc/version' 2>&1)" = "sh: can't create /proc/version: Permission denied"`}, User: "65534"}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("busybox's sh does not give busybox's error message (exit %d)", code)
	}
	// The env specs' check: `sh -c env` with a configMap key as a name.
	cfg = &container.Config{Image: Busybox, Env: []string{"data-1=value-1"},
		Cmd: []string{"sh", "-c", `env | grep -qx data-1=value-1`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("busybox's sh does not pass on data-1 to env (exit %d)", code)
	}
	cfg = &container.Config{Image: Agnhost, Entrypoint: []string{"/bin/bash"}, Cmd: []string{"-c", `test -n "$BASH_VERSION" && [[ a == a ]]`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("agnhost's /bin/bash is not bash (exit %d)", code)
	}
	// The hostnameOverride specs' image: `hostname -f` answers from
	// /etc/hosts.
	cfg = &container.Config{Image: GlibcDNS, Hostname: "override-host",
		Cmd: []string{"sh", "-c", `test "$(hostname);$(hostname -f);" = "override-host;override-host;"`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("hostname -f in %s exited %d", GlibcDNS, code)
	}
}
