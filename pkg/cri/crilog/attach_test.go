package crilog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// attachFrames renders writes as the engine's attach stream frames them.
func attachFrames(writes []struct {
	s string
	e bool
},
) *bytes.Buffer {
	var in bytes.Buffer
	for _, w := range writes {
		s := stdcopy.Stdout
		if w.e {
			s = stdcopy.Stderr
		}
		var hdr [8]byte
		hdr[0] = byte(s)
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(w.s)))
		in.Write(hdr[:])
		in.WriteString(w.s)
	}
	return &in
}

func tagged(t *testing.T, w *Writer) string {
	t.Helper()
	var got []string
	for _, r := range readRecords(t, w.path) {
		tag := "F"
		if r.Partial {
			tag = "P"
		}
		got = append(got, string(r.Stream)+" "+tag+" "+string(r.Content))
	}
	return strings.Join(got, "\n")
}

// TestCopyAttach: lines cut across frames come out whole, each stream's
// apart; a line past MaxLineSize comes out in P pieces and an F; at the
// stream's end an unfinished last line comes out as P, as the engine logs
// it; a stream that breaks leaves its unfinished lines out, for the
// engine's log has them whole.
func TestCopyAttach(t *testing.T) {
	long := strings.Repeat("x", MaxLineSize+10)
	writes := []struct {
		s string
		e bool
	}{{"one\ntw", false}, {"err ", true}, {"o\n", false}, {"line\n", true}, {long[:100], false}, {long[100:] + "\nlast", false}, {"half", true}}
	lines := "stdout F one\nstdout F two\nstderr F err line\nstdout P " + long[:MaxLineSize] + "\nstdout F " + long[MaxLineSize:]

	w := newWriter(t)
	if err := CopyAttach(&trickleReader{data: attachFrames(writes).Bytes()}, false, w); err != nil {
		t.Fatal(err)
	}
	if got, want := tagged(t, w), lines+"\nstdout P last\nstderr P half"; got != want {
		t.Errorf("records:\n%.300q\nwant:\n%.300q", got, want)
	}
	// Each line has a later stamp than the one before, even those that
	// came in one read (the pieces of one line may share theirs).
	recs := readRecords(t, w.path)
	for i := 1; i < len(recs); i++ {
		if samePiece := recs[i-1].Partial && recs[i].Stream == recs[i-1].Stream; !recs[i].Time.After(recs[i-1].Time) && !(samePiece && recs[i].Time.Equal(recs[i-1].Time)) {
			t.Errorf("record %d stamped %v, not after record %d's %v", i, recs[i].Time, i-1, recs[i-1].Time)
		}
	}

	broken := errors.New("connection reset")
	w = newWriter(t)
	err := CopyAttach(io.MultiReader(attachFrames(writes), iotest.ErrReader(broken)), false, w)
	if !errors.Is(err, broken) {
		t.Fatalf("broken stream: %v", err)
	}
	if got := tagged(t, w); got != lines {
		t.Errorf("records of a broken stream:\n%.300q\nwant:\n%.300q", got, lines)
	}

	w = newWriter(t)
	if err := CopyAttach(strings.NewReader("a tty\r\nline\r\nprompt$ "), true, w); err != nil {
		t.Fatal(err)
	}
	if got, want := tagged(t, w), "stdout F a tty\r\nstdout F line\r\nstdout P prompt$ "; got != want {
		t.Errorf("tty records:\n%q\nwant:\n%q", got, want)
	}
}
