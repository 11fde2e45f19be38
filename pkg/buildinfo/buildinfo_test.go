package buildinfo

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	old := Commit
	defer func() { Commit = old }()
	Commit = "abc123"
	i := Get("cri-compose", "1.2.3")
	if i.Version != "1.2.3" || i.Commit != "abc123" || i.GoVersion != runtime.Version() || i.CRIAPI != "v1" {
		t.Errorf("Get: %+v", i)
	}
	// The CRI API module is listed only in binaries that link it (not
	// this test): cmd/cri-compose's TestSubcommands checks it there.
	var b bytes.Buffer
	if err := i.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"cri-compose 1.2.3\n", "commit:   abc123\n", "go:       " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n", "CRI API:  v1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteUnknownCommit(t *testing.T) {
	var b bytes.Buffer
	if err := (Info{Program: "p", Version: "v", GoVersion: "go", Platform: "x/y", CRIAPI: "v1", CRIAPIVersion: "v0.37.2", Modified: true}).Write(&b); err != nil {
		t.Fatal(err)
	}
	want := "p v\ncommit:   unknown (modified)\ngo:       go x/y\nCRI API:  v1 (k8s.io/cri-api v0.37.2)\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
