package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cri-compose/cri-compose/pkg/flagdoc"
	"github.com/cri-compose/cri-compose/test/images"
)

// binary builds cri-compose once per test process.
func binary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build cri-compose with")
	}
	bin := filepath.Join(t.TempDir(), "cri-compose")
	cmd := exec.Command(goBin, "build", "-ldflags", "-X github.com/cri-compose/cri-compose/pkg/buildinfo.Commit=0123456789ab", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func runBinary(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("%s %v: %v", bin, args, err)
	return "", -1
}

// TestSubcommands runs the built binary: version, the hidden
// config-reference, the old --version flag, and doctor against the real
// engine (exit 0: nothing fails on a host that runs the tests; it names
// what the bounding set lacks).
func TestSubcommands(t *testing.T) {
	bin := binary(t)

	out, code := runBinary(t, bin, "version")
	if code != 0 {
		t.Fatalf("version: exit %d\n%s", code, out)
	}
	for _, want := range []string{"cri-compose ", "commit:   0123456789ab", "go:       go", "CRI API:  v1 (k8s.io/cri-api v0."} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("cri-compose version:\n%s", out)

	if out, code := runBinary(t, bin, "--version"); code != 0 || !strings.HasPrefix(out, "cri-compose ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}

	out, code = runBinary(t, bin, "config-reference")
	if err := flagdoc.Current(referencePath, referenceSection, out, "`make docs`"); code != 0 || err != nil {
		t.Errorf("config-reference: exit %d; %v", code, err)
	}
	doc := filepath.Join(t.TempDir(), "configuration.md")
	if err := os.WriteFile(doc, []byte("# Title\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code := runBinary(t, bin, "config-reference", doc); code != 0 {
		t.Errorf("config-reference %s: exit %d", doc, code)
	}
	if err := flagdoc.Current(doc, referenceSection, configReference(), "config-reference"); err != nil {
		t.Errorf("config-reference FILE: %v", err)
	}

	d := images.Engine(t)
	if !d.IsLocal() {
		t.Skip("doctor: the engine is not local")
	}
	dir := t.TempDir()
	out, code = runBinary(t, bin, "doctor", "--state-dir", filepath.Join(dir, "state"), "--listen", "unix://"+filepath.Join(dir, "cri.sock"))
	t.Logf("cri-compose doctor:\n%s", out)
	if code != 0 {
		t.Errorf("doctor: exit %d, want 0", code)
	}
	if !strings.HasPrefix(out, "CHECK ") || !strings.Contains(out, "\nnegative oom_score_adj ") {
		t.Errorf("doctor output is not the table")
	}

	// A failing check (the state dir is a file) makes the exit status 1.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := runBinary(t, bin, "doctor", "--state-dir", file, "--listen", "unix://"+filepath.Join(dir, "cri.sock")); code != 1 {
		t.Errorf("doctor with a file as state dir: exit %d, want 1\n%s", code, out)
	}
}
