package projectcli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

func TestWriteExport(t *testing.T) {
	resp := &cricomposev1.ExportProjectResponse{
		ProjectName: "ns-web",
		ComposeYaml: []byte("name: ns-web\n"),
		Files: []*cricomposev1.File{
			{Path: "volumes/web/1/site/link", SymlinkTarget: "index.html"},
			{Path: "volumes/web/1/site", Directory: true, Mode: 0o555},
			{Path: "volumes/web/1/site/index.html", Content: []byte("<h1>hi</h1>"), Mode: 0o644},
			{Path: "volumes/web/1/site/empty", Directory: true, Mode: 0o700},
			{Path: "volumes/web/0/app.conf", Content: []byte("a=1\n"), Mode: 0o600},
		},
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := WriteExport(resp, dir, false); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if read("compose.yaml") != "name: ns-web\n" || read("volumes/web/0/app.conf") != "a=1\n" || read("volumes/web/1/site/link") != "<h1>hi</h1>" {
		t.Error("written content differs")
	}
	// Shipped files and folders keep their modes; what the export makes
	// itself (the folder, volumes/…, the compose file with the pod's
	// environment) is the exporting user's only.
	for rel, mode := range map[string]os.FileMode{"volumes/web/0/app.conf": 0o600, "volumes/web/1/site": 0o555, "volumes/web/1/site/empty": 0o700,
		".": 0o700, "volumes": 0o700, "volumes/web": 0o700, "volumes/web/0": 0o700, "compose.yaml": 0o600} {
		if fi, err := os.Stat(filepath.Join(dir, rel)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %o", rel, fi.Mode(), err, mode)
		}
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "volumes/web/1/site"), 0o755) })

	// Not over something, unless replacing; replacing keeps other files.
	if err := WriteExport(resp, dir, false); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("second write: %v, want a not-empty error", err)
	}
	if err := os.Chmod(filepath.Join(dir, "volumes/web/1/site"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteExport(resp, dir, true); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if read("notes.txt") != "mine" {
		t.Error("replace removed a file the export does not write")
	}

	// Paths that leave the folder, and a file written through a link.
	for _, bad := range [][]*cricomposev1.File{
		{{Path: "../escape", Content: []byte("x")}},
		{{Path: "/etc/escape", Content: []byte("x")}},
		{{Path: "volumes/../../escape", Content: []byte("x")}},
		{{Path: "compose.yaml", Content: []byte("x")}},
		{{Path: "a", SymlinkTarget: "/etc"}, {Path: "a/passwd", Content: []byte("x")}},
	} {
		out := filepath.Join(t.TempDir(), "bad")
		err := WriteExport(&cricomposev1.ExportProjectResponse{Files: bad}, out, false)
		if err == nil {
			t.Errorf("files %v: written", bad)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(out), "escape")); err == nil {
			t.Errorf("files %v: wrote outside the folder", bad)
		}
	}
}

func TestWriteTable(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	var b bytes.Buffer
	err := WriteTable(&b, []*cricomposev1.Project{{
		Name: "ns-web-0123abcd", PodSandboxId: "0123456789abcdef0123",
		Metadata:  &cricomposev1.PodMetadata{Name: "web", Namespace: "ns"},
		State:     cricomposev1.ProjectState_PROJECT_STATE_READY,
		CreatedAt: now.Add(-3 * time.Minute).UnixNano(),
		Services: []*cricomposev1.Service{
			{Name: "pod", State: cricomposev1.ServiceState_SERVICE_STATE_RUNNING},
			{Name: "init", State: cricomposev1.ServiceState_SERVICE_STATE_EXITED, ExitCode: 0},
			{Name: "app", State: cricomposev1.ServiceState_SERVICE_STATE_CREATED},
		},
	}}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := "PROJECT          POD     POD ID         STATE  CREATED  SERVICES\n" +
		"ns-web-0123abcd  ns/web  0123456789abc  Ready  3m       pod (running), init (exited 0), app (created)\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant\n%s", b.String(), want)
	}
}

func TestInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("o", "", "")
	fs.Bool("force", false, "")
	got := interspersed(fs, []string{"POD", "-o", "dir", "--force", "--timeout=3s"})
	if want := []string{"-o", "dir", "--force", "--timeout=3s", "--", "POD"}; !slices.Equal(got, want) {
		t.Errorf("interspersed: %q, want %q", got, want)
	}
}
