package crilog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dockerTime is the fixed-width layout Docker stamps log messages with.
const dockerTime = "2006-01-02T15:04:05.000000000Z07:00"

// msg is one log message as the engine keeps it.
type msg struct {
	stream  byte // 1 stdout, 2 stderr
	ts      time.Time
	content string // with its '\n' if the line is complete
}

func tsN(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }

func (m msg) payload() []byte {
	return []byte(m.ts.Format(dockerTime) + " " + m.content)
}

func frame(stream byte, payload []byte) []byte {
	hdr := make([]byte, 8, 8+len(payload))
	hdr[0] = stream
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	return append(hdr, payload...)
}

// encode renders msgs as the logs endpoint streams them.
func encode(tty bool, msgs []msg) []byte {
	var b []byte
	for _, m := range msgs {
		if tty {
			b = append(b, m.payload()...)
		} else {
			b = append(b, frame(m.stream, m.payload())...)
		}
	}
	return b
}

// trickleReader returns 1, 2 or 3 bytes per Read, so frames and lines arrive
// split at every possible boundary.
type trickleReader struct {
	data []byte
	n    int
}

func (r *trickleReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	r.n = r.n%3 + 1
	n := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[n:]
	return n, nil
}

type closeRecorder struct {
	io.Reader
	closed *bool
}

func (c closeRecorder) Close() error { *c.closed = true; return nil }

// engine fakes Docker's logs endpoint over a fixed set of messages.
type engine struct {
	msgs   []msg
	tty    bool
	cutAt  int // if > 0, the first connection drops after this many messages
	conns  int
	sinces []time.Time
	closed bool
}

func (e *engine) source(ctx context.Context, since time.Time) (io.ReadCloser, error) {
	e.conns++
	e.sinces = append(e.sinces, since)
	sel := since0(e.msgs, since)
	if e.conns == 1 && e.cutAt > 0 {
		sel = e.msgs[:e.cutAt]
	}
	e.closed = false
	return closeRecorder{&trickleReader{data: encode(e.tty, sel)}, &e.closed}, nil
}

func newWriter(t *testing.T) *Writer {
	t.Helper()
	w, err := OpenWriter(filepath.Join(t.TempDir(), "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

type trec struct {
	ts time.Time
	rec
}

func fileRecords(t *testing.T, w *Writer) []trec {
	t.Helper()
	var out []trec
	for _, r := range readRecords(t, w.path) {
		out = append(out, trec{r.Time, rec{r.Stream, r.Partial, string(r.Content)}})
	}
	return out
}

func checkRecords(t *testing.T, got, want []trec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records %v\nwant %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		if !got[i].ts.Equal(want[i].ts) || got[i].rec != want[i].rec {
			t.Errorf("record %d = %v %v, want %v %v", i, got[i].ts, got[i].rec, want[i].ts, want[i].rec)
		}
	}
}

// join concatenates P records into lines, as kubelet does.
func join(recs []trec) []rec {
	var out []rec
	var cur strings.Builder
	for _, r := range recs {
		cur.WriteString(r.content)
		if !r.partial {
			out = append(out, rec{r.stream, false, cur.String()})
			cur.Reset()
		}
	}
	if cur.Len() > 0 {
		out = append(out, rec{recs[len(recs)-1].stream, true, cur.String()})
	}
	return out
}

func TestPumpMultiplexed(t *testing.T) {
	big := strings.Repeat("0123456789", 15000) // 150 kB: several pieces
	e := &engine{msgs: []msg{
		{1, tsN(1), "hello\n"},
		{2, tsN(2), "oops: it broke\n"},
		{1, tsN(3), "partial "}, // Docker's partial message: no '\n'
		{1, tsN(4), "rest\n"},
		{1, tsN(5), "\n"},
		{0, tsN(6), "stdin goes to stdout\n"},
		{2, tsN(7), big + "\n"},
	}}
	w := newWriter(t)
	last, err := Pump(context.Background(), w, e.source, false, Position{}, time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !last.Latest().Equal(tsN(7)) {
		t.Errorf("last = %v, want %v", last, tsN(7))
	}
	if !e.closed {
		t.Error("source not closed")
	}
	recs := fileRecords(t, w)
	checkRecords(t, recs[:6], []trec{
		{tsN(1), rec{Stdout, false, "hello"}},
		{tsN(2), rec{Stderr, false, "oops: it broke"}},
		{tsN(3), rec{Stdout, true, "partial "}},
		{tsN(4), rec{Stdout, false, "rest"}},
		{tsN(5), rec{Stdout, false, ""}},
		{tsN(6), rec{Stdout, false, "stdin goes to stdout"}},
	})
	bigRecs := recs[6:]
	if len(bigRecs) < len(big)/MaxLineSize {
		t.Fatalf("big message written as %d records", len(bigRecs))
	}
	for _, r := range bigRecs {
		if !r.ts.Equal(tsN(7)) || r.stream != Stderr || len(r.content) > MaxLineSize {
			t.Fatalf("bad record of big message: %v %v", r.ts, r.rec)
		}
	}
	if got := join(bigRecs); len(got) != 1 || got[0].content != big {
		t.Errorf("big message joined to %v", got)
	}
}

func TestPumpTTY(t *testing.T) {
	big := strings.Repeat("abcdefghij", 20000) // 200 kB: several pieces
	e := &engine{tty: true, msgs: []msg{
		{1, tsN(1), "line one\r\n"},
		{1, tsN(2), "\r\n"},
		{1, tsN(3), big + "\n"},
		{1, tsN(4), "prompt$ "}, // stream ends mid-line
	}}
	w := newWriter(t)
	last, err := Pump(context.Background(), w, e.source, true, Position{}, time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !last.Latest().Equal(tsN(4)) {
		t.Errorf("last = %v, want %v", last, tsN(4))
	}
	recs := fileRecords(t, w)
	for _, r := range recs {
		if r.stream != Stdout {
			t.Errorf("tty record on %s", r.stream)
		}
	}
	if len(recs) < 3 {
		t.Fatalf("got %d records", len(recs))
	}
	checkRecords(t, recs[:2], []trec{
		{tsN(1), rec{Stdout, false, "line one\r"}},
		{tsN(2), rec{Stdout, false, "\r"}},
	})
	checkRecords(t, recs[len(recs)-1:], []trec{{tsN(4), rec{Stdout, true, "prompt$ "}}})
	if got := join(recs[2 : len(recs)-1]); len(got) != 1 || got[0].content != big {
		t.Errorf("big line joined to %v", got)
	}
}

// A dropped connection is resumed from the returned timestamp: the engine
// sends the last message again (since is inclusive) and Pump drops it.
func TestPumpResume(t *testing.T) {
	for _, tty := range []bool{false, true} {
		name := "multiplexed"
		if tty {
			name = "tty"
		}
		t.Run(name, func(t *testing.T) {
			e := &engine{tty: tty, cutAt: 2, msgs: []msg{
				{1, tsN(1), "one\n"},
				{1, tsN(2), "two\n"},
				{1, tsN(3), "three\n"},
				{1, tsN(4), "four\n"},
			}}
			w := newWriter(t)
			last, err := Pump(context.Background(), w, e.source, tty, Position{}, time.Time{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !last.Latest().Equal(tsN(2)) {
				t.Fatalf("first pump: last = %v, want %v", last, tsN(2))
			}
			last, err = Pump(context.Background(), w, e.source, tty, last, last.Latest(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !last.Latest().Equal(tsN(4)) {
				t.Errorf("second pump: last = %v, want %v", last, tsN(4))
			}
			if !e.sinces[1].Equal(tsN(2)) {
				t.Errorf("second connection since = %v, want %v", e.sinces[1], tsN(2))
			}
			checkRecords(t, fileRecords(t, w), []trec{
				{tsN(1), rec{Stdout, false, "one"}},
				{tsN(2), rec{Stdout, false, "two"}},
				{tsN(3), rec{Stdout, false, "three"}},
				{tsN(4), rec{Stdout, false, "four"}},
			})

			// Nothing new: last stays where it was.
			last, err = Pump(context.Background(), w, e.source, tty, At(tsN(4)), tsN(4), nil)
			if err != nil || !last.Latest().Equal(tsN(4)) {
				t.Errorf("pump with nothing new = %v, %v; want %v, nil", last, err, tsN(4))
			}
			if n := len(fileRecords(t, w)); n != 4 {
				t.Errorf("file has %d records after empty pump, want 4", n)
			}
		})
	}
}

func TestPumpCancel(t *testing.T) {
	pr, pw := io.Pipe()
	src := func(ctx context.Context, since time.Time) (io.ReadCloser, error) { return pr, nil }
	w := newWriter(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		last Position
		err  error
	}
	done := make(chan result, 1)
	go func() {
		last, err := Pump(ctx, w, src, false, Position{}, time.Time{}, nil)
		done <- result{last, err}
	}()
	// The pipe write returns once Pump has read the whole frame; then the
	// stream goes quiet, as a running container's does.
	if _, err := pw.Write(frame(1, msg{1, tsN(1), "before cancel\n"}.payload())); err != nil {
		t.Fatal(err)
	}
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Pump did not return after cancel")
	}
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", r.err)
	}
	if !r.last.Latest().Equal(tsN(1)) {
		t.Errorf("last = %v, want %v", r.last, tsN(1))
	}
	if _, err := pw.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("stream not closed after cancel: write = %v", err)
	}
	checkRecords(t, fileRecords(t, w), []trec{{tsN(1), rec{Stdout, false, "before cancel"}}})
}

func TestPumpErrors(t *testing.T) {
	good := frame(1, msg{1, tsN(1), "ok\n"}.payload())
	tests := []struct {
		name   string
		stream []byte
		tty    bool
		want   string
		is     error
	}{
		{name: "truncated header", stream: append(bytes.Clone(good), 1, 0, 0), is: io.ErrUnexpectedEOF},
		{name: "truncated payload", stream: append(bytes.Clone(good), good[:len(good)-2]...), is: io.ErrUnexpectedEOF},
		{name: "engine error", stream: append(bytes.Clone(good), frame(3, []byte("no such container"))...), want: "no such container"},
		{name: "unknown stream", stream: append(bytes.Clone(good), frame(7, []byte("x"))...), want: "unknown stream 7"},
		{name: "no timestamp", stream: append(bytes.Clone(good), frame(1, []byte("plain\n"))...), want: "without timestamp"},
		{name: "bad timestamp", stream: append(bytes.Clone(good), frame(1, []byte("noon hi\n"))...), want: "invalid timestamp"},
		{name: "tty bad timestamp", stream: append([]byte(msg{1, tsN(1), "ok\n"}.payload()), "noon hi\n"...), tty: true, want: "invalid timestamp"},
		{name: "tty no timestamp", stream: append([]byte(msg{1, tsN(1), "ok\n"}.payload()), "plain\n"...), tty: true, want: "without timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
				return io.NopCloser(&trickleReader{data: tt.stream}), nil
			}
			w := newWriter(t)
			last, err := Pump(context.Background(), w, src, tt.tty, Position{}, time.Time{}, nil)
			switch {
			case tt.is != nil:
				if !errors.Is(err, tt.is) {
					t.Errorf("err = %v, want %v", err, tt.is)
				}
			case tt.want != "":
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("err = %v, want %q", err, tt.want)
				}
			default:
				if err != nil {
					t.Errorf("err = %v", err)
				}
			}
			// What came before the bad part is written and reported.
			if !last.Latest().Equal(tsN(1)) {
				t.Errorf("last = %v, want %v", last, tsN(1))
			}
		})
	}

	openErr := errors.New("no such container")
	src := func(ctx context.Context, since time.Time) (io.ReadCloser, error) { return nil, openErr }
	last, err := Pump(context.Background(), newWriter(t), src, false, At(tsN(5)), tsN(5), nil)
	if !errors.Is(err, openErr) || !last.Latest().Equal(tsN(5)) {
		t.Errorf("Pump with failing source = %v, %v; want %v, %v", last, err, tsN(5), openErr)
	}
}
