package crilog

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// perStream is what a log holds of each stream, lines joined.
func perStream(t *testing.T, recs []Record) [2]string {
	t.Helper()
	var out [2]string
	for _, r := range recs {
		out[index(r.Stream)] += string(r.Content)
		if !r.Partial {
			out[index(r.Stream)] += "\n"
		}
	}
	return out
}

// TestSeamRandom: a CRI log written up to a random point from the attach
// stream (stamped on arrival, a little after the engine's stamps, or a
// little before), from the engine's log (its stamps), or first one then
// the other, is taken over by a pump at Seam's position, and then holds
// each stream's output exactly once: nothing lost, nothing twice.
func TestSeamRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		n := 2 + r.IntN(200)
		msgs := make([]msg, 0, n)
		arrived := make([]time.Time, 0, n)
		clock, last := t0, t0
		var begun [3]bool // each stream starts with a line of its own, for repeats can only be placed by time
		for j := 0; len(msgs) < n; j++ {
			s := byte(1 + r.IntN(2))
			if r.IntN(8) > 0 {
				clock = clock.Add(time.Duration(r.IntN(200)) * time.Millisecond)
			}
			// The attach stream brings each message in the engine's order,
			// up to 300 ms late, or the engine stamps it a little later;
			// never at a time the engine stamped (both stamp in ns).
			at := clock.Add(time.Duration(r.IntN(300)-5)*time.Millisecond + time.Duration(1+r.IntN(999)))
			if at.Before(last) {
				at = last
			}
			last = at
			add := func(content string) {
				msgs = append(msgs, msg{stream: s, ts: clock, content: content})
				arrived = append(arrived, at)
			}
			first := !begun[s]
			begun[s] = true
			switch k := r.IntN(10); {
			case first || k < 6:
				add(fmt.Sprintf("m%d %s\n", j, strings.Repeat("y", r.IntN(40))))
			case k < 8:
				add("again\n") // the same line, here and there
			default: // a long line the engine split: pieces of one stamp
				add(fmt.Sprintf("piece%d-", j))
				add("rest\n")
			}
		}
		k := 1 + r.IntN(len(msgs)-1)
		mode := r.IntN(3) // 0: attach stream, 1: engine's log, 2: engine's log up to a point, then the stream
		split := r.IntN(k + 1)
		w := newWriter(t)
		for j, m := range msgs[:k] {
			ts := arrived[j]
			if mode == 1 || (mode == 2 && j < split) {
				ts = m.ts
			}
			partial := m.content[len(m.content)-1] != '\n'
			if err := w.WriteRecord(ts, Stream([]string{"", "stdout", "stderr"}[m.stream]), partial, []byte(m.content)); err != nil {
				t.Fatal(err)
			}
		}
		e := &engine{msgs: msgs}
		pos, err := Seam(context.Background(), w.path, e.source, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Pump(context.Background(), w, e.source, false, pos, Resume(pos, true, true, false), nil); err != nil {
			t.Fatal(err)
		}
		var want [2]string
		for _, m := range msgs {
			want[m.stream-1] += m.content
		}
		if got := perStream(t, readRecords(t, w.path)); got != want {
			for s := range got {
				d := 0
				for d < min(len(got[s]), len(want[s])) && got[s][d] == want[s][d] {
					d++
				}
				if got[s] != want[s] {
					t.Errorf("stream %d from byte %d:\ngot  %.200q\nwant %.200q", s+1, d, got[s][max(d-100, 0):], want[s][max(d-100, 0):])
				}
			}
			t.Fatalf("log %d (%d messages, written to %d, mode %d at %d): seam %+v", i, len(msgs), k, mode, split, pos)
		}
		w.Close()
		os.Remove(w.path)
	}
}

// TestSeamRepeatedLines: in a run of one line repeated, the seam is the
// message the engine stamped last up to the last record's arrival.
func TestSeamRepeatedLines(t *testing.T) {
	var msgs []msg
	for j := range 100 {
		msgs = append(msgs, msg{stream: 1, ts: tsN(50 * j), content: "x\n"})
	}
	w := newWriter(t)
	for j := range 40 {
		if err := w.WriteRecord(tsN(50*j+5), Stdout, false, []byte("x\n")); err != nil {
			t.Fatal(err)
		}
	}
	pos, err := Seam(context.Background(), w.path, (&engine{msgs: msgs}).source, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Mark{Time: tsN(50 * 39), Seen: 1}); pos.Stdout != want {
		t.Errorf("seam %+v, want %+v", pos.Stdout, want)
	}
}

// TestSeamEmpty: no log, or an empty one, is taken over from the start.
func TestSeamEmpty(t *testing.T) {
	w := newWriter(t)
	e := &engine{msgs: []msg{{stream: 1, ts: tsN(1), content: "a\n"}}}
	for _, path := range []string{w.path, w.path + ".missing"} {
		if pos, err := Seam(context.Background(), path, e.source, false); err != nil || pos != (Position{}) {
			t.Errorf("%s: %+v, %v", path, pos, err)
		}
	}
	if e.conns != 0 {
		t.Errorf("%d fetches for an empty log", e.conns)
	}
}

// TestSeamAfterRotation: a log kubelet just rotated (renamed away, a new
// empty file in its place) is taken over after the rotated file's end, not
// from the start.
func TestSeamAfterRotation(t *testing.T) {
	var msgs []msg
	for j := range 10 {
		msgs = append(msgs, msg{stream: 1, ts: tsN(50 * j), content: fmt.Sprintf("line %d\n", j)})
	}
	w := newWriter(t)
	for j, m := range msgs[:6] {
		if err := w.WriteRecord(tsN(50*j+3), Stdout, false, []byte(m.content)); err != nil {
			t.Fatal(err)
		}
	}
	for _, old := range []string{".20250304-050000.gz", ".20250304-050607", ".20250304-040000", ".tmp"} {
		if err := os.WriteFile(w.path+old, []byte("not a log\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(w.path, w.path+".20250304-050608"); err != nil {
		t.Fatal(err)
	}
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	e := &engine{msgs: msgs}
	pos, err := Seam(context.Background(), w.path, e.source, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Mark{Time: tsN(250), Seen: 1}); pos.Stdout != want {
		t.Errorf("seam %+v, want %+v (after line 5)", pos.Stdout, want)
	}
}
