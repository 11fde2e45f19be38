package imagebuild

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
)

// readTar returns the members of a tar in order, with their headers and data.
func readTar(t *testing.T, b []byte) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	var hdrs []*tar.Header
	data := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs, data
		}
		if err != nil {
			t.Fatalf("reading tar: %v", err)
		}
		d, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		if _, dup := data[h.Name]; dup {
			t.Fatalf("tar member %s appears twice", h.Name)
		}
		hdrs = append(hdrs, h)
		data[h.Name] = d
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

var testFiles = []File{
	{Path: "/bin/tool", Mode: 0o755 | os.ModeSetuid, Data: []byte("#!tool\n")},
	{Path: "/bin/alias", Hardlink: "/bin/tool"},
	{Path: "/bin/sh", Link: "tool"},
	{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\n")},
	{Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777},
	{Path: "/home/user/.profile", Data: []byte("x"), Uid: 1000, Gid: 100},
	{Path: "/var/lib/empty", Mode: os.ModeDir},
}

var testConfig = Config{
	Entrypoint:   []string{"/bin/tool"},
	Cmd:          []string{"-v"},
	Env:          []string{"PATH=/bin", "A=b"},
	User:         "1000:100",
	WorkingDir:   "/home/user",
	ExposedPorts: []string{"80", "53/udp"},
	Labels:       map[string]string{"b": "2", "a": "1"},
}

func TestArchiveStructure(t *testing.T) {
	var buf bytes.Buffer
	id, err := Archive(&buf, []string{"localhost/test/img:v1", "example/other"}, testFiles, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	_, members := readTar(t, buf.Bytes())

	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(members["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 {
		t.Fatalf("manifest has %d entries, want 1", len(manifest))
	}
	m := manifest[0]
	if got, want := strings.Join(m.RepoTags, ","), "localhost/test/img:v1,example/other:latest"; got != want {
		t.Errorf("RepoTags = %s, want %s", got, want)
	}

	config, ok := members[m.Config]
	if !ok {
		t.Fatalf("config %s missing from the archive", m.Config)
	}
	if got := sum(config); m.Config != got+".json" || id != "sha256:"+got {
		t.Errorf("config name %s, image id %s, config digest %s: they must agree", m.Config, id, got)
	}

	if len(m.Layers) != 1 {
		t.Fatalf("Layers = %v, want one", m.Layers)
	}
	layer, ok := members[m.Layers[0]]
	if !ok {
		t.Fatalf("layer %s missing from the archive", m.Layers[0])
	}
	layerSum := sum(layer)
	if m.Layers[0] != layerSum+"/layer.tar" {
		t.Errorf("layer path %s, want %s/layer.tar", m.Layers[0], layerSum)
	}
	if string(members[layerSum+"/VERSION"]) != "1.0" {
		t.Errorf("VERSION = %q", members[layerSum+"/VERSION"])
	}
	var v1 map[string]any
	if err := json.Unmarshal(members[layerSum+"/json"], &v1); err != nil || v1["id"] != layerSum {
		t.Errorf("legacy json %s (%v): id must be %s", members[layerSum+"/json"], err, layerSum)
	}

	var repos map[string]map[string]string
	if err := json.Unmarshal(members["repositories"], &repos); err != nil {
		t.Fatalf("repositories: %v", err)
	}
	if repos["localhost/test/img"]["v1"] != layerSum || repos["example/other"]["latest"] != layerSum {
		t.Errorf("repositories = %v", repos)
	}

	var img struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			Entrypoint, Cmd, Env []string
			User, WorkingDir     string
			ExposedPorts         map[string]struct{}
			Labels               map[string]string
		} `json:"config"`
		RootFS struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		History []struct {
			CreatedBy string `json:"created_by"`
		} `json:"history"`
	}
	if err := json.Unmarshal(config, &img); err != nil {
		t.Fatalf("config: %v", err)
	}
	if img.Architecture != runtime.GOARCH || img.OS != "linux" {
		t.Errorf("platform %s/%s, want linux/%s", img.OS, img.Architecture, runtime.GOARCH)
	}
	if img.RootFS.Type != "layers" || len(img.RootFS.DiffIDs) != 1 || img.RootFS.DiffIDs[0] != "sha256:"+layerSum {
		t.Errorf("rootfs = %+v, want layers [sha256:%s]", img.RootFS, layerSum)
	}
	if len(img.History) != 1 {
		t.Errorf("history has %d entries, want one per layer", len(img.History))
	}
	c := img.Config
	if strings.Join(c.Entrypoint, " ") != "/bin/tool" || strings.Join(c.Cmd, " ") != "-v" ||
		strings.Join(c.Env, " ") != "PATH=/bin A=b" || c.User != "1000:100" || c.WorkingDir != "/home/user" {
		t.Errorf("config = %+v", c)
	}
	if _, ok := c.ExposedPorts["80/tcp"]; !ok || len(c.ExposedPorts) != 2 {
		t.Errorf("ExposedPorts = %v, want 80/tcp and 53/udp", c.ExposedPorts)
	}
	if _, ok := c.ExposedPorts["53/udp"]; !ok {
		t.Errorf("ExposedPorts = %v, want 80/tcp and 53/udp", c.ExposedPorts)
	}
	if c.Labels["a"] != "1" || c.Labels["b"] != "2" {
		t.Errorf("Labels = %v", c.Labels)
	}
}

func TestLayerEntries(t *testing.T) {
	var buf bytes.Buffer
	diffID, err := Layer(&buf, testFiles)
	if err != nil {
		t.Fatal(err)
	}
	if diffID != "sha256:"+sum(buf.Bytes()) {
		t.Errorf("diff id %s is not the digest of the layer", diffID)
	}
	hdrs, data := readTar(t, buf.Bytes())

	type want struct {
		typ      byte
		mode     int64
		link     string
		uid, gid int
	}
	wants := map[string]want{
		"bin/":               {typ: tar.TypeDir, mode: 0o755},
		"bin/tool":           {typ: tar.TypeReg, mode: 0o4755},
		"bin/alias":          {typ: tar.TypeLink, mode: 0o4755, link: "bin/tool"},
		"bin/sh":             {typ: tar.TypeSymlink, mode: 0o777, link: "tool"},
		"etc/":               {typ: tar.TypeDir, mode: 0o755},
		"etc/passwd":         {typ: tar.TypeReg, mode: 0o644},
		"tmp/":               {typ: tar.TypeDir, mode: 0o1777},
		"home/":              {typ: tar.TypeDir, mode: 0o755},
		"home/user/":         {typ: tar.TypeDir, mode: 0o755},
		"home/user/.profile": {typ: tar.TypeReg, mode: 0o644, uid: 1000, gid: 100},
		"var/":               {typ: tar.TypeDir, mode: 0o755},
		"var/lib/":           {typ: tar.TypeDir, mode: 0o755},
		"var/lib/empty/":     {typ: tar.TypeDir, mode: 0o755},
	}
	if len(hdrs) != len(wants) {
		var names []string
		for _, h := range hdrs {
			names = append(names, h.Name)
		}
		t.Errorf("layer has %d entries %v, want %d", len(hdrs), names, len(wants))
	}
	seen := map[string]int{}
	for i, h := range hdrs {
		seen[strings.TrimSuffix(h.Name, "/")] = i
		w, ok := wants[h.Name]
		if !ok {
			t.Errorf("unexpected entry %q", h.Name)
			continue
		}
		if h.Typeflag != w.typ || h.Mode != w.mode || h.Linkname != w.link || h.Uid != w.uid || h.Gid != w.gid {
			t.Errorf("%s: type %c mode %o link %q owner %d:%d, want type %c mode %o link %q owner %d:%d",
				h.Name, h.Typeflag, h.Mode, h.Linkname, h.Uid, h.Gid, w.typ, w.mode, w.link, w.uid, w.gid)
		}
		if !h.ModTime.Equal(Epoch) {
			t.Errorf("%s: mtime %v, want %v", h.Name, h.ModTime, Epoch)
		}
	}
	// Parents before children, hard links after their targets.
	for name, i := range seen {
		if j := strings.LastIndex(name, "/"); j > 0 {
			if p, ok := seen[name[:j]]; !ok || p > i {
				t.Errorf("%s comes before its parent directory", name)
			}
		}
	}
	if seen["bin/alias"] < seen["bin/tool"] {
		t.Errorf("hard link bin/alias comes before its target")
	}
	if got := hdrs[seen["bin/tool"]].FileInfo().Mode(); got&os.ModeSetuid == 0 {
		t.Errorf("bin/tool lost its setuid bit: %v", got)
	}
	if string(data["bin/tool"]) != "#!tool\n" {
		t.Errorf("bin/tool holds %q", data["bin/tool"])
	}
}

func TestDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	idA, err := Archive(&a, []string{"x/y:z"}, testFiles, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	// Same content in another order: same image.
	rev := make([]File, len(testFiles))
	for i, f := range testFiles {
		rev[len(testFiles)-1-i] = f
	}
	idB, err := Archive(&b, []string{"x/y:z"}, rev, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	if idA != idB || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("same input gave different archives (%s, %s)", idA, idB)
	}
	// Tags do not change the image ID; content does.
	idC, err := Archive(io.Discard, []string{"other:tag"}, testFiles, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	if idC != idA {
		t.Errorf("a different tag changed the image id: %s vs %s", idC, idA)
	}
	changed := append([]File{}, testFiles...)
	changed[3].Data = []byte("root:x:0:0::/:/bin/sh\n")
	idD, err := Archive(io.Discard, []string{"x/y:z"}, changed, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	if idD == idA {
		t.Errorf("different content gave the same image id %s", idD)
	}
}

func TestErrors(t *testing.T) {
	cases := map[string]struct {
		refs  []string
		files []File
	}{
		"root":                {files: []File{{Path: "/"}}},
		"duplicate":           {files: []File{{Path: "/a"}, {Path: "a"}}},
		"file as parent":      {files: []File{{Path: "/a"}, {Path: "/a/b"}}},
		"dangling hard link":  {files: []File{{Path: "/a", Hardlink: "/b"}}},
		"hard link to a link": {files: []File{{Path: "/a", Link: "x"}, {Path: "/b", Hardlink: "/a"}}},
		"both links":          {files: []File{{Path: "/x"}, {Path: "/a", Link: "x", Hardlink: "/x"}}},
		"digest ref":          {refs: []string{"a@sha256:0000"}},
		"empty ref":           {refs: []string{""}},
		"empty tag":           {refs: []string{"a:"}},
	}
	for name, c := range cases {
		if _, err := Archive(io.Discard, c.refs, c.files, Config{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestNoTags(t *testing.T) {
	var buf bytes.Buffer
	if _, err := Archive(&buf, nil, []File{{Path: "/a", Data: []byte("a")}}, Config{}); err != nil {
		t.Fatal(err)
	}
	_, members := readTar(t, buf.Bytes())
	if _, ok := members["repositories"]; ok {
		t.Errorf("an untagged image has a repositories file")
	}
	if _, ok := members["manifest.json"]; !ok {
		t.Errorf("no manifest.json")
	}
}
