package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
)

// TestCopyFrames: lines cut across frames come out whole, each stream's
// apart; a line past crilog.MaxLineSize comes out in P pieces and an F;
// an unfinished last line as P.
func TestCopyFrames(t *testing.T) {
	var in bytes.Buffer
	frame := func(s stdcopy.StdType, p string) { // the engine's framing
		var hdr [8]byte
		hdr[0] = byte(s)
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(p)))
		in.Write(hdr[:])
		in.WriteString(p)
	}
	long := strings.Repeat("x", crilog.MaxLineSize+10)
	for _, w := range []struct {
		s string
		e bool
	}{{"one\ntw", false}, {"err ", true}, {"o\n", false}, {"line\n", true}, {long[:100], false}, {long[100:] + "\nlast", false}} {
		s := stdcopy.Stdout
		if w.e {
			s = stdcopy.Stderr
		}
		frame(s, w.s)
	}
	path := filepath.Join(t.TempDir(), "c.log")
	w, err := crilog.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := copyFrames(&in, w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		r, err := crilog.ParseLine([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		tag := "F"
		if r.Partial {
			tag = "P"
		}
		got = append(got, string(r.Stream)+" "+tag+" "+string(r.Content))
	}
	want := []string{"stdout F one", "stdout F two", "stderr F err line",
		"stdout P " + long[:crilog.MaxLineSize], "stdout F " + long[crilog.MaxLineSize:], "stdout P last"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("records:\n%.300q\nwant:\n%.300q", got, want)
	}
}
