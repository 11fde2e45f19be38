package vk

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestCheckPayloadPath(t *testing.T) {
	for p, ok := range map[string]bool{
		"a": true, "a/b": true, "a/..b": true, "a..": true,
		"": false, "/abs": false, "../x": false, "a/../../x": false, "..data": false, "..x/y": false,
		strings.Repeat("a", 4097): false,
	} {
		if err := checkPayloadPath(p); (err == nil) != ok {
			t.Errorf("checkPayloadPath(%.20q) = %v, want ok=%v", p, err, ok)
		}
	}
}

// TestWriteAtomicReaders reads the volume while it is rewritten: a reader
// must always see one complete version (both files of the same
// generation), never a mix, as a container reading a mounted configMap
// during an update does.
func TestWriteAtomicReaders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	gen := func(i int) map[string]file {
		v := []byte(strings.Repeat(string(rune('a'+i%26)), 100))
		return map[string]file{"x": {data: v, mode: 0o644}, "sub/y": {data: v, mode: 0o644}}
	}
	if err := writeAtomic(dir, gen(0), nil); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var torn, reads atomic.Int64
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				// Open through ..data once, as a reader that
				// resolves the folder first.
				data, err := os.Readlink(filepath.Join(dir, dataDirName))
				if err != nil {
					continue
				}
				x, err1 := os.ReadFile(filepath.Join(dir, data, "x"))
				y, err2 := os.ReadFile(filepath.Join(dir, data, "sub/y"))
				if err1 != nil || err2 != nil {
					continue // that version was removed meanwhile
				}
				reads.Add(1)
				if string(x) != string(y) {
					torn.Add(1)
				}
			}
		})
	}
	for i := 1; i < 200; i++ {
		if err := writeAtomic(dir, gen(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if torn.Load() > 0 {
		t.Errorf("%d of %d reads saw two versions", torn.Load(), reads.Load())
	}
	// One version folder is left, the current one.
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 4 { // ..<ts>, ..data, sub, x
		t.Errorf("volume holds %v", names)
	}
}

func TestWriteAtomicReplacesForeignEntries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	// A plain file and folder where links belong, and a version folder
	// left by a write that died half-way.
	for _, d := range []string{"sub", "..2020_01_01_00_00_00.1"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(dir, map[string]file{"x": {data: []byte("new"), mode: 0o644}, "sub/y": {data: []byte("y"), mode: 0o600}}, nil); err != nil {
		t.Fatal(err)
	}
	if readVol(t, dir, "x") != "new" || readVol(t, dir, "sub/y") != "y" {
		t.Error("content")
	}
	if target, _ := os.Readlink(filepath.Join(dir, "sub")); target != "..data/sub" {
		t.Errorf("sub links to %q", target)
	}
	if _, err := os.Stat(filepath.Join(dir, "..2020_01_01_00_00_00.1")); !os.IsNotExist(err) {
		t.Error("stale version folder kept")
	}
	// A mode change alone is a change.
	before, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if err := writeAtomic(dir, map[string]file{"x": {data: []byte("new"), mode: 0o600}, "sub/y": {data: []byte("y"), mode: 0o600}}, nil); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Readlink(filepath.Join(dir, dataDirName))
	fi, _ := os.Stat(filepath.Join(dir, "x"))
	if before == after || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode change not written (%s → %s, %v)", before, after, fi.Mode())
	}
}
