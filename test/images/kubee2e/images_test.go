package kubee2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/images/critest"
)

// TestShellKeepsEnvNames: in the busybox stand-in, `sh -c env` shows a
// variable whose name is not a shell identifier (a configMap key as env,
// as the e2e specs set), and /bin/bash is bash, as upstream's images have;
// in glibc-dns-testing's, `hostname -f` names the container.
func TestShellKeepsEnvNames(t *testing.T) {
	c := images.Engine(t)
	bash, err := BashStatic()
	if err != nil {
		images.SkipOrFail(t, "%v", err)
	}
	imgs, err := Images(Programs{Agnhost: []byte("not run"), Bash: bash,
		Critest: critest.Programs{Webserver: []byte("not run"), NNP: []byte("not run"), Curl: []byte("not run")}})
	if err != nil {
		images.SkipOrFail(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, img := range imgs {
		if img.Refs[0] != Busybox && img.Refs[0] != GlibcDNS {
			continue
		}
		var archive bytes.Buffer
		if _, err := img.Archive(&archive); err != nil {
			t.Fatal(err)
		}
		if err := c.ImageLoad(ctx, &archive); err != nil {
			t.Fatalf("load %s: %v", img.Refs[0], err)
		}
		t.Cleanup(func() { _ = c.ImageRemove(context.Background(), img.Refs[0], true) })
	}
	cfg := &container.Config{Image: Busybox, Env: []string{"data-1=value-1", "1-data-2=value-2"},
		Cmd: []string{"sh", "-c", `env | grep -qx data-1=value-1 && env | grep -qx 1-data-2=value-2`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("sh -c env lost a variable whose name has a '-' (exit %d)", code)
	}
	cfg = &container.Config{Image: Busybox, Cmd: []string{"/bin/bash", "-c", `test -n "$BASH_VERSION" && [[ a == a ]] && /bin/ls / >/dev/null`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("/bin/bash is not bash (exit %d)", code)
	}
	// The hostnameOverride specs' image: `hostname -f` answers from
	// /etc/hosts.
	cfg = &container.Config{Image: GlibcDNS, Hostname: "override-host",
		Cmd: []string{"sh", "-c", `test "$(hostname);$(hostname -f);" = "override-host;override-host;"`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("hostname -f in %s exited %d", GlibcDNS, code)
	}
}
