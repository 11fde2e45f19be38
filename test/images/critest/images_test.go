package critest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cri-compose/cri-compose/test/images"
)

func fakePrograms() Programs {
	return Programs{
		Pgrep: []byte("pgrep"), Ipcs: []byte("ipcs"), Webserver: []byte("webserver"), NNP: []byte("nnp"),
		Curl: []byte("curl"), Nc: []byte("nc"), Dig: []byte("dig"), Getent: []byte("getent"),
	}
}

// TestImages checks the names against critest v1.37.0's and what the specs
// need inside, without an engine.
func TestImages(t *testing.T) {
	imgs, err := Images(fakePrograms())
	if err != nil {
		images.SkipOrFail(t, "%v", err)
	}
	want := []string{
		Busybox, Nginx, Httpd, NoNewPrivs, HostnetNginx, Pause, PauseOldName,
		StagingPrefix + "test-image-user-uid:latest",
		StagingPrefix + "test-image-user-username:latest",
		StagingPrefix + "test-image-user-uid-group:latest",
		StagingPrefix + "test-image-user-username-group:latest",
		StagingPrefix + "test-image-predefined-group:latest",
		StagingPrefix + "test-image-1:latest",
		StagingPrefix + "test-image-2:latest",
		StagingPrefix + "test-image-3:latest",
		StagingPrefix + "test-image-latest:latest",
		StagingPrefix + "test-image-tag:test",
		StagingPrefix + "test-image-tag:all",
		StagingPrefix + "test-image-tags:1",
		StagingPrefix + "test-image-tags:2",
		StagingPrefix + "test-image-tags:3",
	}
	byRef := map[string]Image{}
	ids := map[string]string{} // image ID -> first ref
	for _, img := range imgs {
		var buf bytes.Buffer
		id, err := img.Archive(&buf)
		if err != nil {
			t.Fatalf("%v: %v", img.Refs, err)
		}
		if other, dup := ids[id]; dup {
			t.Errorf("%s and %s are the same image %s", other, img.Refs[0], id)
		}
		ids[id] = img.Refs[0]
		for _, r := range img.Refs {
			if _, dup := byRef[r]; dup {
				t.Errorf("%s is made twice", r)
			}
			byRef[r] = img
		}
	}
	for _, r := range want {
		if _, ok := byRef[r]; !ok {
			t.Errorf("%s is missing", r)
		}
	}
	if len(byRef) != len(want) {
		t.Errorf("made %d names, want %d", len(byRef), len(want))
	}

	files := func(ref string) map[string]bool {
		m := map[string]bool{}
		for _, f := range byRef[ref].Files {
			m[f.Path] = true
		}
		return m
	}
	bb := files(Busybox)
	for _, p := range []string{"/bin/sh", "/bin/ls", "/bin/pgrep", "/bin/ipcs", "/bin/pidof", "/bin/netstat", "/bin/brctl", "/bin/top", "/etc/passwd"} {
		if !bb[p] {
			t.Errorf("busybox image lacks %s", p)
		}
	}
	for _, f := range byRef[Busybox].Files {
		if f.Path == "/bin/ls" && f.Hardlink == "" {
			t.Errorf("/bin/ls should be a hard link to busybox, is %+v", f)
		}
	}
	if !files(Nginx)["/usr/sbin/nginx"] || !files(HostnetNginx)["/usr/sbin/nginx"] {
		t.Error("nginx images lack /usr/sbin/nginx")
	}
	if !files(Httpd)["/usr/local/apache2/bin/httpd"] {
		t.Error("httpd image lacks its server")
	}
	for _, f := range byRef[NoNewPrivs].Files {
		if f.Path == "/usr/local/bin/nnp" && (f.Mode&os.ModeSetuid == 0 || f.Uid != 0) {
			t.Errorf("nnp must be setuid root: %+v", f)
		}
	}
	if got := byRef[StagingPrefix+"test-image-user-username-group:latest"].Config.User; got != "www-data:1004" {
		t.Errorf("username-group image: USER %q", got)
	}
	for _, f := range byRef[StagingPrefix+"test-image-predefined-group:latest"].Files {
		if f.Path == "/etc/group" && !strings.Contains(string(f.Data), "group-defined-in-image:x:50000:default-user\n") {
			t.Errorf("predefined-group /etc/group:\n%s", f.Data)
		}
	}
	// The shared busybox file list must not have been changed.
	for _, f := range byRef[Busybox].Files {
		if f.Path == "/etc/group" && strings.Contains(string(f.Data), "50000") {
			t.Error("predefined-group's /etc/group leaked into busybox")
		}
	}
}

// TestBuild builds the programs the way test/conformance/run does.
func TestBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the programs of cmd/")
	}
	if _, err := exec.LookPath("go"); err != nil {
		images.SkipOrFail(t, "no go command: %v", err)
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(context.Background(), "", root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"pgrep": p.Pgrep, "ipcs": p.Ipcs, "webserver": p.Webserver, "nnp": p.NNP, "curl": p.Curl, "nc": p.Nc,
		"dig": p.Dig, "getent": p.Getent,
	} {
		if !bytes.HasPrefix(b, []byte("\x7fELF")) {
			t.Errorf("%s is not an ELF executable", name)
		}
	}
}

// TestShell installs Debian's dynamic busybox as sh when the host has one
// (it is not installed by default: test/conformance/run fetches it).
func TestShell(t *testing.T) {
	path := os.Getenv("CRITEST_SHELL_BUSYBOX")
	if path == "" {
		t.Skip("CRITEST_SHELL_BUSYBOX names no dynamic busybox")
	}
	sh, err := LoadShell(path)
	if err != nil {
		t.Fatal(err)
	}
	p := fakePrograms()
	p.Shell = sh
	imgs, err := Images(p)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]string{}
	for _, f := range imgs[0].Files {
		byPath[f.Path] = f.Hardlink
	}
	if byPath["/bin/sh"] != shellPath || byPath["/bin/ash"] != shellPath || byPath["/bin/ls"] != "/bin/busybox" {
		t.Errorf("sh -> %q, ash -> %q, ls -> %q", byPath["/bin/sh"], byPath["/bin/ash"], byPath["/bin/ls"])
	}
	if len(sh.Libs) < 2 {
		t.Errorf("libraries: %d", len(sh.Libs))
	}
}
