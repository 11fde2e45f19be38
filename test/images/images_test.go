package images

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/imagebuild"
	"github.com/moby/moby/api/types/container"
)

func TestBusyboxFiles(t *testing.T) {
	files, err := BusyboxFiles()
	if err != nil {
		SkipOrFail(t, "%v", err)
	}
	byPath := map[string]bool{}
	links := 0
	for _, f := range files {
		byPath[f.Path] = true
		if f.Hardlink == "/bin/busybox" {
			links++
		}
	}
	for _, p := range []string{"/bin/busybox", "/bin/sh", "/bin/ls", "/bin/id", "/bin/sleep", "/etc/passwd", "/etc/group"} {
		if !byPath[p] {
			t.Errorf("%s is missing from the image", p)
		}
	}
	if links < 100 {
		t.Errorf("only %d applet links", links)
	}
	var a, b bytes.Buffer
	idA, err := BusyboxArchive(&a, "localhost/cri-compose/test-busybox:a")
	if err != nil {
		t.Fatal(err)
	}
	idB, err := BusyboxArchive(&b, "localhost/cri-compose/test-busybox:b")
	if err != nil {
		t.Fatal(err)
	}
	if idA != idB {
		t.Errorf("the same content gave image ids %s and %s", idA, idB)
	}
}

func TestBusyboxRuns(t *testing.T) {
	c := Engine(t)
	const ref = "localhost/cri-compose/test-busybox:images-test"
	NeedBusybox(t, c, ref)
	script := `set -e
test "$(id -u www-data)" = 33
test "$(id -u nobody)" = 65534
test "$(id -g nobody)" = 65534
test "$(whoami)" = root
test -x /bin/ls
/bin/ls /bin/busybox >/dev/null
test "$(stat -c %h /bin/busybox)" -gt 100
/usr/bin/env true
test -d /tmp -a -w /tmp
echo "$PATH" | grep -q /usr/local/sbin
`
	if code := Run(t, c, &container.Config{Image: ref, Cmd: []string{"sh", "-c", script}}, nil, time.Minute); code != 0 {
		t.Errorf("checks in the busybox image exited %d", code)
	}
	if code := Run(t, c, &container.Config{Image: ref, Cmd: []string{"id", "-u"}, User: "www-data"}, nil, time.Minute); code != 0 {
		t.Errorf("running as www-data exited %d", code)
	}
	if code := Run(t, c, &container.Config{Image: ref, Cmd: []string{"false"}}, nil, time.Minute); code != 1 {
		t.Errorf("false exited %d, want 1", code)
	}
}

// TestSetuidSurvivesLoad checks that the engine keeps the setuid bit and the
// owners that imagebuild writes.
func TestSetuidSurvivesLoad(t *testing.T) {
	c := Engine(t)
	files, err := BusyboxFiles()
	if err != nil {
		SkipOrFail(t, "%v", err)
	}
	var bin []byte
	for _, f := range files {
		if f.Path == "/bin/busybox" {
			bin = f.Data
		}
	}
	files = append(files,
		imagebuild.File{Path: "/usr/local/bin/suid", Mode: 0o755 | os.ModeSetuid, Data: bin},
		imagebuild.File{Path: "/home/u/file", Mode: 0o600, Data: []byte("x"), Uid: 1000, Gid: 1001},
	)
	const ref = "localhost/cri-compose/test-busybox:setuid-test"
	var buf bytes.Buffer
	if _, err := imagebuild.Archive(&buf, []string{ref}, files, BusyboxConfig()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.ImageLoad(ctx, &buf); err != nil {
		t.Fatal(err)
	}
	script := `set -e
test "$(stat -c %a /usr/local/bin/suid)" = 4755
test "$(stat -c %u:%g:%a /home/u/file)" = 1000:1001:600
test "$(stat -c %a /tmp)" = 1777
test "$(stat -c %u /var/www)" = 33
`
	if code := Run(t, c, &container.Config{Image: ref, Cmd: []string{"sh", "-c", script}}, nil, time.Minute); code != 0 {
		t.Errorf("checks exited %d", code)
	}
}
