package staging

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWriteTar checks the archives staging sends: a folder's content at
// the root with its links kept (the atomic writer's ..data layout), and a
// file under its container path with its parent folders.
func TestWriteTar(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_11_30")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "greeting"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..2026_11_30", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/greeting", filepath.Join(dir, "greeting")); err != nil {
		t.Fatal(err)
	}
	got := tarEntries(t, dir, "")
	want := map[string]string{
		"..2026_11_30/":         "dir",
		"..2026_11_30/greeting": "file:hello",
		"..data":                "link:..2026_11_30",
		"greeting":              "link:..data/greeting",
	}
	if len(got) != len(want) {
		t.Errorf("folder archive: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("folder archive entry %s: %q, want %q", k, got[k], v)
		}
	}

	got = tarEntries(t, filepath.Join(data, "greeting"), "etc/app/app.conf")
	want = map[string]string{"etc/": "dir", "etc/app/": "dir", "etc/app/app.conf": "file:hello"}
	if len(got) != len(want) {
		t.Errorf("file archive: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("file archive entry %s: %q, want %q", k, got[k], v)
		}
	}

	if got := tarEntries(t, filepath.Join(dir, "missing"), ""); len(got) != 0 {
		t.Errorf("archive of a missing folder: %v, want empty", got)
	}
}

func tarEntries(t *testing.T, src, as string) map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if err := writeTar(&buf, src, as); err != nil {
		t.Fatalf("writeTar(%s): %v", src, err)
	}
	out := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out[h.Name] = "dir"
		case tar.TypeSymlink:
			out[h.Name] = "link:" + h.Linkname
		case tar.TypeReg:
			b, _ := io.ReadAll(tr)
			out[h.Name] = "file:" + string(b)
		default:
			out[h.Name] = string(h.Typeflag)
		}
	}
}

// TestTreeSignature: a rewrite of a file (by rename, as the atomic writer
// does) changes the signature; reading does not.
func TestTreeSignature(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "greeting")
	if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := treeSignature(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(f); err != nil {
		t.Fatal(err)
	}
	if b, _ := treeSignature(dir); b != a {
		t.Error("signature changed without a change")
	}
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, []byte("bye!!"), 0o644); err != nil { // same size
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(tmp, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, f); err != nil {
		t.Fatal(err)
	}
	if b, _ := treeSignature(dir); b == a {
		t.Error("signature unchanged after the file was replaced")
	}
	if s, err := treeSignature(filepath.Join(dir, "missing")); err != nil || s == "" {
		t.Errorf("signature of a missing folder: %q, %v", s, err)
	}
}

func TestEngineManaged(t *testing.T) {
	for p, want := range map[string]bool{
		"/dev/termination-log": true, "/etc/hosts": true, "/etc/resolv.conf": true, "/etc/hostname": true,
		"/proc/x": true, "/sys": true, "/etc/app.conf": false, "/device": false, "/etc/hosts.d/x": false,
	} {
		if got := engineManaged(p); got != want {
			t.Errorf("engineManaged(%s) = %v, want %v", p, got, want)
		}
	}
}

func TestDecide(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		t.Skip("no host name")
	}
	for _, tc := range []struct {
		mode   Mode
		shares bool
		engine string
		want   bool
	}{
		{Always, true, host, true},
		{Never, false, "elsewhere", false},
		{Auto, false, host, true},       // a remote endpoint
		{"", false, host, true},         // "" is auto
		{Auto, true, host, false},       // the local engine
		{Auto, true, "", false},         // an engine that gives no name
		{Auto, true, "vm-engine", true}, // a socket forwarded from a VM
	} {
		if got := Decide(tc.mode, tc.shares, tc.engine); got != tc.want {
			t.Errorf("Decide(%q, shares %v, %q) = %v, want %v", tc.mode, tc.shares, tc.engine, got, tc.want)
		}
	}
}
