package crilog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tailEngine fakes the logs endpoint as Docker answers a tailed fetch: the
// last tail messages of the log, in the log's order, then those stamped
// since or later. It counts the fetches of each kind.
type tailEngine struct {
	msgs     []msg
	tails    []int
	fulls    int
	failTail error
	short    int // if > 0, a tailed answer holds at most this many messages (a tail cut short)
}

func (e *tailEngine) tail(_ context.Context, since time.Time, tail int) (io.ReadCloser, error) {
	e.tails = append(e.tails, tail)
	if e.failTail != nil {
		return nil, e.failTail
	}
	if e.short > 0 {
		tail = min(tail, e.short)
	}
	last := e.msgs[max(len(e.msgs)-tail, 0):]
	return io.NopCloser(bytes.NewReader(encode(false, since0(last, since)))), nil
}

func (e *tailEngine) full(_ context.Context, since time.Time) (io.ReadCloser, error) {
	e.fulls++
	return io.NopCloser(bytes.NewReader(encode(false, since0(e.msgs, since)))), nil
}

// since0 is msgs stamped since or later (the engine's since is inclusive).
func since0(msgs []msg, since time.Time) []msg {
	var sel []msg
	for _, m := range msgs {
		if !m.ts.Before(since) {
			sel = append(sel, m)
		}
	}
	return sel
}

func read(t *testing.T, src Source, since time.Time) []byte {
	t.Helper()
	rc, err := src(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lines is n stdout messages, 100 ms apart: tailLate is 20 of them.
func lines(n int) []msg {
	msgs := make([]msg, n)
	for i := range msgs {
		msgs[i] = msg{stream: 1, ts: lineTime(i), content: fmt.Sprintf("line %d\n", i)}
	}
	return msgs
}

// bigLines is 80 stdout lines of 60 KiB, 100 ms apart: more than a
// tailed answer holds.
func bigLines() []msg {
	msgs := make([]msg, 80)
	for i := range msgs {
		msgs[i] = msg{stream: 1, ts: lineTime(i), content: fmt.Sprintf("line %d ", i) + strings.Repeat("x", 60<<10) + "\n"}
	}
	return msgs
}

func lineTime(i int) time.Time { return t0.Add(time.Duration(i) * 100 * time.Millisecond) }

// written is the pump's position after it wrote msgs[:k+1] (none if k <
// 0): per stream, the last message's time and how many of its messages
// were stamped then.
func written(msgs []msg, k int) Position {
	var pos Position
	for _, m := range msgs[:k+1] {
		mk := pos.mark(Stdout)
		if m.stream == 2 {
			mk = pos.mark(Stderr)
		}
		if m.ts.Equal(mk.Time) {
			mk.Seen++
		} else {
			*mk = Mark{Time: m.ts, Seen: 1}
		}
	}
	return pos
}

// after is the numbers of the messages ("m<j>" or "line <j>") in a
// multiplexed answer that come after msgs[k]: what the pump would write.
func after(t *testing.T, b []byte, k int) []int {
	t.Helper()
	var js []int
	for len(b) > 0 {
		n := int(binary.BigEndian.Uint32(b[4:8]))
		_, content, _ := bytes.Cut(b[8:8+n], []byte{' '})
		b = b[8+n:]
		f := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(string(content), "line "), "m"))
		j, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("message %.40q", content)
		}
		if j > k {
			js = append(js, j)
		}
	}
	return js
}

// TestTailedAnswers: the tailed answer is taken when it reaches back past
// the pump's marks; one that does not is asked again for more while more
// could help; past the limits, with no guess and with no mark, the fetch
// is by time alone. What the pump would write from each answer is what it
// would write from a fetch by time alone.
func TestTailedAnswers(t *testing.T) {
	big := bigLines()
	two := lines(1000) // stderr's one message, 799, is 800 ms after stdout's 798
	two[799] = msg{stream: 2, ts: lineTime(799), content: "line 799\n"}
	for _, c := range []struct {
		name  string
		msgs  []msg
		k     int // the pump wrote msgs[:k+1]
		since time.Time
		short int
		want  int
		tails []int
		fulls int
	}{
		{"reaches back past the mark", lines(1000), 899, lineTime(899), 0, 256, []int{256}, 0},
		{"not far enough: asked again", lines(1000), 500, lineTime(500), 0, 256, []int{256, 1024}, 0},
		{"cut short by the engine", lines(1000), 899, lineTime(899), 100, 256, []int{256}, 1},
		{"the other stream's mark not reached", two, 899, lineTime(790), 0, 256, []int{256}, 1},
		{"nothing written yet", lines(1000), -1, lineTime(0), 0, 256, nil, 1},
		{"zero since", lines(1000), 899, time.Time{}, 0, 256, nil, 1},
		{"no guess", lines(1000), 899, lineTime(899), 0, 0, nil, 1},
		{"too long to hold", big, 0, lineTime(0), 0, 10, []int{10, 40, 160}, 1},
		{"past maxTail", lines(10), 5, lineTime(5), 0, maxTail + 1, nil, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &tailEngine{msgs: c.msgs, short: c.short}
			var counts Counters
			pos := written(c.msgs, c.k)
			got := read(t, Tailed(e.tail, CountByTime(e.full, &counts), func() int { return c.want }, func() Position { return pos }, &counts), c.since)
			if g, w := after(t, got, c.k), after(t, encode(false, since0(c.msgs, c.since)), c.k); !slices.Equal(g, w) {
				t.Errorf("to write: %d messages, want the %d of a fetch by time", len(g), len(w))
			}
			if fmt.Sprint(e.tails) != fmt.Sprint(c.tails) || e.fulls != c.fulls {
				t.Errorf("tailed fetches %v and %d by time, want %v and %d", e.tails, e.fulls, c.tails, c.fulls)
			}
			if tails, fulls := counts.TailFetches.Load(), counts.TimeFetches.Load(); tails != uint64(len(c.tails)) || fulls != uint64(c.fulls) {
				t.Errorf("counted %d tailed fetches and %d by time, want %d and %d", tails, fulls, len(c.tails), c.fulls)
			}
		})
	}
}

// TestTailedSameAsFull: over random logs of two streams, each in order,
// whose messages reach the log up to 2 s after the other stream's later
// ones (tailLate), random positions of the pump, the since Resume gives
// them, any guess and tails the engine may cut short, the pump writes from
// a tailed fetch what it writes from a fetch by time alone.
func TestTailedSameAsFull(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		n := 1 + r.IntN(300)
		msgs := make([]msg, n)
		clock := t0
		var last [3]time.Time
		for j := range msgs {
			s := byte(1 + r.IntN(2))
			if r.IntN(8) > 0 { // now and then the same time: pieces of a split line
				clock = clock.Add(time.Duration(r.IntN(300)) * time.Millisecond)
			}
			ts := clock.Add(-time.Duration(r.Int64N(int64(2*time.Second) + 1))) // as late as the engine may be
			if ts.Before(last[s]) {
				ts = last[s]
			}
			last[s] = ts
			msgs[j] = msg{stream: s, ts: ts, content: fmt.Sprintf("m%d\n", j)}
		}
		k := r.IntN(n)
		pos := written(msgs, k)
		since := Resume(pos, r.IntN(2) == 0, r.IntN(2) == 0, r.IntN(2) == 0)
		e := &tailEngine{msgs: msgs}
		if r.IntN(4) == 0 {
			e.short = 1 + r.IntN(50)
		}
		want := r.IntN(50)
		got := read(t, Tailed(e.tail, e.full, func() int { return want }, func() Position { return pos }, nil), since)
		if g, w := after(t, got, k), after(t, encode(false, since0(msgs, since)), k); !slices.Equal(g, w) {
			t.Fatalf("log %d (%d messages, written to %d, since %v, guess %d, cut at %d): to write %v, want %v", i, n, k, since, want, e.short, g, w)
		}
	}
}

// TestTailedErrors: a fetch that fails, or an answer cut inside a frame,
// is an error for the pump to retry, with nothing passed on.
func TestTailedErrors(t *testing.T) {
	pos := func() Position { return At(lineTime(5)) }
	e := &tailEngine{msgs: lines(10), failTail: errors.New("engine away")}
	if _, err := Tailed(e.tail, e.full, func() int { return 5 }, pos, nil)(context.Background(), lineTime(5)); err == nil || e.fulls != 0 {
		t.Errorf("a failed tailed fetch: %v, %d fetches by time", err, e.fulls)
	}
	cut := func(context.Context, time.Time, int) (io.ReadCloser, error) {
		b := encode(false, lines(3))
		return io.NopCloser(bytes.NewReader(b[:len(b)-2])), nil
	}
	if _, err := Tailed(cut, e.full, func() int { return 5 }, pos, nil)(context.Background(), lineTime(5)); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("an answer cut in a frame: %v", err)
	}
}

// TestTailedStartsFromLastAnswer: a pump's next fetch asks at once for
// about as many messages as its last answer held past since.
func TestTailedStartsFromLastAnswer(t *testing.T) {
	msgs := lines(1000)
	e := &tailEngine{msgs: msgs}
	pos := written(msgs, 899)
	src := Tailed(e.tail, e.full, func() int { return 10 }, func() Position { return pos }, nil)
	first := read(t, src, lineTime(899)) // 879 on: 121 messages
	if fmt.Sprint(e.tails) != "[10 40 160]" {
		t.Fatalf("first fetch: tails %v", e.tails)
	}
	e.tails = nil
	if again := read(t, src, lineTime(899)); !bytes.Equal(again, first) || fmt.Sprint(e.tails) != "[126]" {
		t.Errorf("second fetch: tails %v (want [126]: 101 past since, and a quarter), same answer %v", e.tails, bytes.Equal(again, first))
	}
}

// TestTailedRests: after an answer too long to hold, the next fetches are
// by time alone, without trying the tail first.
func TestTailedRests(t *testing.T) {
	big := bigLines()
	e := &tailEngine{msgs: big}
	pos := written(big, 0)
	src := Tailed(e.tail, e.full, func() int { return 100 }, func() Position { return pos }, nil)
	read(t, src, lineTime(0))
	read(t, src, lineTime(0))
	if fmt.Sprint(e.tails) != "[100]" || e.fulls != 2 {
		t.Errorf("tailed fetches %v and %d by time, want [100] and 2", e.tails, e.fulls)
	}
}
