package kubee2e

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/cri-compose/cri-compose/pkg/imagebuild"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/images/critest"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// TestAgnhostFiles: bash, nc, dig and getent take the place of busybox's
// applets of those names (busybox 1.37's defconfig has no dig or getent:
// the /bin ones here stand for a busybox that would); glibc-dns-testing
// has dig and getent too.
func TestAgnhostFiles(t *testing.T) {
	bb := []imagebuild.File{
		{Path: "/bin/busybox", Mode: 0o755, Data: []byte("busybox")},
		{Path: "/bin/bash", Hardlink: "/bin/busybox"},
		{Path: "/bin/nc", Hardlink: "/bin/busybox"},
		{Path: "/bin/wget", Hardlink: "/bin/busybox"},
		{Path: "/bin/getent", Hardlink: "/bin/busybox"},
		{Path: "/bin/dig", Hardlink: "/bin/busybox"},
		{Path: "/etc/passwd", Mode: 0o644}, {Path: "/etc/group", Mode: 0o644},
	}
	p := Programs{Bash: []byte("bash"), Critest: critest.Programs{
		Nc: []byte("nc"), Curl: []byte("curl"), Dig: []byte("dig"), Getent: []byte("getent"),
	}}
	for _, c := range []struct {
		image string
		files []imagebuild.File
		want  map[string]string
	}{
		{Agnhost, agnhostFiles(bb, p), map[string]string{
			"/bin/bash": "bash", "/bin/nc": "nc", "/usr/bin/curl": "curl", "/usr/bin/dig": "dig", "/usr/bin/getent": "getent",
		}},
		{GlibcDNS, withDNSTools(bb, p), map[string]string{"/usr/bin/dig": "dig", "/usr/bin/getent": "getent"}},
	} {
		files := map[string][]imagebuild.File{}
		for _, f := range c.files {
			files[f.Path] = append(files[f.Path], f)
		}
		for path, data := range c.want {
			if fs := files[path]; len(fs) != 1 || string(fs[0].Data) != data || fs[0].Hardlink != "" || fs[0].Mode != 0o755 {
				t.Errorf("%s: %s: %+v, want %s alone", c.image, path, fs, data)
			}
		}
		for _, path := range []string{"/bin/dig", "/bin/getent"} {
			if fs := files[path]; len(fs) != 0 {
				t.Errorf("%s: %s: %+v, want no busybox applet", c.image, path, fs)
			}
		}
		if fs := files["/bin/wget"]; len(fs) != 1 || fs[0].Hardlink != "/bin/busybox" {
			t.Errorf("%s: /bin/wget: %+v, want busybox's applet", c.image, fs)
		}
	}
}

// TestShells: the busybox stand-in's sh is busybox's, with its error
// messages, which the specs compare, and it passes on environment
// variables whose names are not shell identifiers, as upstream's does;
// agnhost's /bin/bash is bash, as upstream's Alpine image has, and its nc
// takes netcat-openbsd's flags; in glibc-dns-testing's, `hostname -f` names
// the container; both have the DNS specs' dig and getent on PATH.
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
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	programs, err := critest.Build(ctx, "", root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := Images(Programs{Busybox: busybox, Agnhost: []byte("not run"), Bash: bash, Critest: programs})
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
	// The e2e suite's nc commands: ours on PATH, netcat-openbsd's messages,
	// and a TCP exchange with busybox's httpd.
	cfg = &container.Config{Image: Agnhost, Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{`
		test "$(command -v nc)" = /bin/nc || exit 2
		out=$(echo hostName | nc -v -t -w 2 127.0.0.1 1 2>&1)
		test $? = 1 && test "$out" = "nc: connect to 127.0.0.1 port 1 (tcp) failed: Connection refused" || exit 3
		busybox httpd -p 127.0.0.1:8080 -h /tmp || exit 4
		nc -vz -w 2 127.0.0.1 8080 || exit 5
		printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 127.0.0.1 8080 | grep -q '^HTTP/1' || exit 6`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("agnhost's nc is not netcat-openbsd's stand-in (exit %d: the check that exits so failed)", code)
	}
	// The DNS specs' tools, in both images that run them: getent finds the
	// container's name in /etc/hosts once DNS (nothing at 127.0.0.1) has
	// refused its AAAA, and dig reports that no server replies.
	for _, image := range []string{Agnhost, GlibcDNS} {
		cfg = &container.Config{Image: image, Hostname: "dns-querier-1", Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{`
			test "$(command -v dig)" = /usr/bin/dig && test "$(command -v getent)" = /usr/bin/getent || exit 2
			echo nameserver 127.0.0.1 > /etc/resolv.conf || exit 3
			getent hosts dns-querier-1 | grep -q ' dns-querier-1$' || exit 4
			getent hosts nothere; test $? = 2 || exit 5
			out=$(dig +short +search -p 1 dns-querier-1); test $? = 9 || exit 6
			test "$out" = "$(printf ';; communications error to 127.0.0.1#1: connection refused\n;; no servers could be reached')" || exit 7`}}
		if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
			t.Errorf("%s's dig or getent (exit %d: the check that exits so failed)", image, code)
		}
	}
	// The hostnameOverride specs' image: `hostname -f` answers from
	// /etc/hosts.
	cfg = &container.Config{Image: GlibcDNS, Hostname: "override-host",
		Cmd: []string{"sh", "-c", `test "$(hostname);$(hostname -f);" = "override-host;override-host;"`}}
	if code := images.Run(t, c, cfg, nil, time.Minute); code != 0 {
		t.Errorf("hostname -f in %s exited %d", GlibcDNS, code)
	}
}
