package crilog

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// out is n bytes of output in no line: n in the engine's log (Cost).
func out(n int) []byte { return bytes.Repeat([]byte("x"), n) }

// TestGateHolds: the attach side may run window bytes ahead of the pump,
// then waits until the pump has caught up below the window.
func TestGateHolds(t *testing.T) {
	g := NewGate(100, time.Hour)
	g.Attach(time.Time{})
	ctx := context.Background()
	if err := g.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	g.Add(Stdout, out(60))
	g.Add(Stderr, out(40)) // 100 ahead: the next read waits
	passed := make(chan error, 1)
	go func() { passed <- g.Wait(ctx) }()
	select {
	case err := <-passed:
		t.Fatalf("Wait returned %v with the pump 100 bytes behind a window of 100", err)
	case <-time.After(50 * time.Millisecond):
	}
	if out, errs := g.Behind(); !out || !errs {
		t.Errorf("Behind() = %v, %v; want both", out, errs)
	}
	g.Pumped(Stdout, time.Now(), 60)
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
	if out, errs := g.Behind(); out || !errs {
		t.Errorf("Behind() = %v, %v after stdout caught up; want false, true", out, errs)
	}
}

// TestGateFrom: what the engine stamped before a later attach does not
// count against it.
func TestGateFrom(t *testing.T) {
	g := NewGate(10, time.Hour)
	from := time.Now()
	g.Attach(from)
	g.Add(Stdout, out(10))
	g.Pumped(Stdout, from.Add(-time.Millisecond), 10)
	if out, _ := g.Behind(); !out {
		t.Fatal("output stamped before the attach counted")
	}
	g.Pumped(Stdout, from, 10)
	if out, _ := g.Behind(); out {
		t.Fatal("output stamped at the attach did not count")
	}
}

// TestGateStall: a pump that makes no progress at all holds the container
// only for the stall time, and the stall is counted.
func TestGateStall(t *testing.T) {
	g := NewGate(10, 50*time.Millisecond)
	g.Attach(time.Time{})
	g.Add(Stdout, out(10))
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		t.Fatalf("Wait with a stalled pump: %v", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("Wait returned after %v, before the stall time", d)
	}
	if g.Stalls() != 1 {
		t.Errorf("Stalls() = %d, want 1", g.Stalls())
	}
}

// TestGateCancel: a waiting read ends with its context.
func TestGateCancel(t *testing.T) {
	g := NewGate(1, time.Hour)
	g.Attach(time.Time{})
	g.Add(Stdout, out(1))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Wait(ctx) }()
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

// TestResume: a stream with output pending resumes at its own mark; one
// without, no earlier than the floor before the latest mark.
func TestResume(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pos := Position{Stdout: Mark{Time: t0.Add(10 * time.Second), Seen: 1}, Stderr: Mark{Time: t0, Seen: 1}}
	if got := Resume(pos, false, true, false); !got.Equal(t0) {
		t.Errorf("stderr pending: since %v, want its mark %v", got, t0)
	}
	if got, want := Resume(pos, true, false, false), t0.Add(10*time.Second-resumeFloor); !got.Equal(want) {
		t.Errorf("stderr quiet: since %v, want %v", got, want)
	}
	if got := Resume(pos, true, false, true); !got.Equal(t0) {
		t.Errorf("stderr quiet while the gate holds: since %v, want its mark %v", got, t0)
	}
	pos.Stderr.Open = true
	if got := Resume(pos, true, false, false); !got.Equal(t0) {
		t.Errorf("stderr in a split line: since %v, want its mark %v", got, t0)
	}
}

// TestLastPosition: per stream, the last record's time and how many of
// that stream's records share it (the pieces of one split line).
func TestLastPosition(t *testing.T) {
	w := newWriter(t)
	t1, t2, t3 := time.Unix(1, 0), time.Unix(2, 0), time.Unix(3, 0)
	for _, r := range []struct {
		ts      time.Time
		s       Stream
		partial bool
		b       string
	}{{t1, Stdout, false, "a\n"}, {t3, Stdout, true, "b1"}, {t2, Stderr, false, "e\n"}, {t3, Stdout, true, "b2"}, {t3, Stdout, false, "b3\n"}} {
		if err := w.WriteRecord(r.ts, r.s, r.partial, []byte(r.b)); err != nil {
			t.Fatal(err)
		}
	}
	pos, err := LastPosition(w.path)
	if err != nil {
		t.Fatal(err)
	}
	want := Position{Stdout: Mark{Time: t3, Seen: 3}, Stderr: Mark{Time: t2, Seen: 1}}
	if !pos.Stdout.Time.Equal(want.Stdout.Time) || pos.Stdout.Seen != 3 || !pos.Stderr.Time.Equal(t2) || pos.Stderr.Seen != 1 {
		t.Fatalf("LastPosition = %+v, want %+v", pos, want)
	}
}

// TestGateMissing: what the attach stream saw and the pump did not write is
// counted per stream until Resync starts the count again.
func TestGateMissing(t *testing.T) {
	g := NewGate(1000, time.Hour)
	g.Attach(time.Time{})
	g.Add(Stdout, out(30))
	g.Add(Stderr, out(7))
	g.Pumped(Stdout, time.Now(), 10)
	if out, errs := g.Missing(); out != 20 || errs != 7 {
		t.Fatalf("Missing() = %d, %d; want 20, 7", out, errs)
	}
	g.Resync()
	if out, errs := g.Missing(); out != 0 || errs != 0 {
		t.Fatalf("Missing() = %d, %d after Resync; want 0, 0", out, errs)
	}
	g.Pumped(Stderr, time.Now(), 5) // more pumped than counted: none missing
	if out, errs := g.Missing(); out != 0 || errs != 0 {
		t.Fatalf("Missing() = %d, %d with the pump ahead; want 0, 0", out, errs)
	}
}

// TestGateCost: the gate counts what output costs in the engine's log, so
// a flood of short lines is held long before its bytes alone reach the
// window, and a line costs the same however the attach stream cut it.
func TestGateCost(t *testing.T) {
	if got := Cost([]byte("line 1234567\n")); got != 13+entryOverhead {
		t.Errorf("Cost of a 13-byte line = %d, want %d", got, 13+entryOverhead)
	}
	if got := Cost([]byte("partial")); got != 7 {
		t.Errorf("Cost of a piece without a newline = %d, want 7", got)
	}
	g := NewGate(1000, time.Hour)
	g.Attach(time.Time{})
	for _, piece := range []string{"a\nb", "b\n", "ccc", "\n"} { // as the attach stream cut it
		g.Add(Stdout, []byte(piece))
	}
	for _, msg := range []string{"a\n", "bb\n", "ccc\n"} { // as the engine logged it
		g.Pumped(Stdout, time.Now(), Cost([]byte(msg)))
	}
	if out, errs := g.Missing(); out != 0 || errs != 0 {
		t.Errorf("missing %d, %d after every line was pumped", out, errs)
	}
	// Thirteen 13-byte lines (169 bytes) fill a window of 1000: the
	// attach stream waits.
	for range 13 {
		g.Add(Stdout, []byte("line 1234567\n"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := g.Wait(ctx); err == nil {
		t.Error("the attach stream read on past the window of short lines")
	}
}

// TestGateExpected: the guess for a tailed fetch counts the messages the
// pump is behind (a 16 KiB line is two: the engine splits it), and is no
// guess while the gate holds.
func TestGateExpected(t *testing.T) {
	g := NewGate(1<<20, time.Hour)
	g.Attach(time.Time{})
	if n := g.Expected(); n != tailSlack {
		t.Errorf("caught up: %d, want %d", n, tailSlack)
	}
	g.Add(Stdout, []byte("a\nb\n"))
	g.Add(Stderr, append(out(engineSplit), '\n'))
	if n := g.Expected(); n != 4+tailSlack {
		t.Errorf("two short lines and a 16 KiB one behind: %d, want %d", n, 4+tailSlack)
	}
	g.Pumped(Stdout, time.Now(), Cost([]byte("a\n")))
	if n := g.Expected(); n != 3+tailSlack {
		t.Errorf("one pumped: %d, want %d", n, 3+tailSlack)
	}
	g.Add(Stdout, out(1<<20)) // a window ahead: held
	if n := g.Expected(); n != 0 {
		t.Errorf("holding: %d, want 0", n)
	}
}

// TestGateOpen: once the container's process has exited, a held attach
// stream goes on at once and is never held again, however far behind the
// pump is.
func TestGateOpen(t *testing.T) {
	g := NewGate(10, time.Hour)
	g.Attach(time.Time{})
	ctx := context.Background()
	g.Add(Stdout, out(10))
	passed := make(chan error, 1)
	go func() { passed <- g.Wait(ctx) }()
	select {
	case err := <-passed:
		t.Fatalf("Wait returned %v with the pump a window behind", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.Open()
	if err := <-passed; err != nil {
		t.Fatal(err)
	}
	g.Add(Stdout, out(1000))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := g.Wait(wctx); err != nil {
		t.Fatalf("an open gate held: %v", err)
	}
}

// TestMessagesExact: the count of the engine's messages does not depend
// on how the attach stream cut the output: 100-byte lines read in 16 KiB
// chunks are one message each (the count drifted by one per chunk), and a
// line is a message per 16 KiB it fills and one for its end.
func TestMessagesExact(t *testing.T) {
	line := append(bytes.Repeat([]byte("x"), 99), '\n')
	var all []byte
	for range 1000 {
		all = append(all, line...)
	}
	long := append(bytes.Repeat([]byte("y"), 2*engineSplit+5), '\n') // 3 messages
	exact := append(bytes.Repeat([]byte("z"), engineSplit), '\n')    // 2: the end is its own
	all = append(append(all, long...), exact...)
	want := 1000 + 3 + 2
	for _, chunk := range []int{1, 7, 100, 4096, engineSplit, len(all)} {
		n, rest := 0, int64(0)
		for p := all; len(p) > 0; {
			c := min(chunk, len(p))
			k, r := messages(p[:c], rest)
			n, rest, p = n+k, r, p[c:]
		}
		if n != want || rest != 0 {
			t.Errorf("in chunks of %d: %d messages, %d bytes of line left; want %d, 0", chunk, n, rest, want)
		}
	}
	if n, rest := messages([]byte("abc"), engineSplit-1); n != 1 || rest != engineSplit+2 {
		t.Errorf("a line crossing 16 KiB unfinished: %d messages, %d left; want 1, %d", n, rest, engineSplit+2)
	}
}
