package crilog

// Hostile input for the log path: whatever the engine's log
// stream or a log file holds, the pump and the reader never panic, the
// pump writes only well-formed CRI records, and the reader emits only
// records that parse. Seed corpora: testdata/fuzz/<Fuzz…>.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

// fuzzFile is a fresh path for one input's log file, removed after it.
func fuzzFile(t *testing.T) string {
	f, err := os.CreateTemp("", "crilog-fuzz-*.log")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	os.Remove(f.Name()) // the writer creates it, as the pump's does
	t.Cleanup(func() { os.Remove(f.Name()) })
	return f.Name()
}

// FuzzPump feeds a log stream, as the engine's logs endpoint would send
// it (multiplexed frames, or a TTY's raw bytes), to Pump.
func FuzzPump(f *testing.F) {
	ts := func(i int) string { return t0.Add(time.Duration(i)*time.Millisecond).Format(dockerTime) + " " }
	f.Add(encode(false, []msg{{1, tsN(1), "hello\n"}, {2, tsN(2), "oops\n"}, {1, tsN(3), "partial "}, {1, tsN(4), "rest\n"}}), false, int64(0))
	f.Add(encode(true, []msg{{1, tsN(1), "a\r\n"}, {1, tsN(2), "b\n"}}), true, int64(0))
	f.Add(frame(1, []byte(ts(5)+"x\n")), false, t0.Add(5*time.Millisecond).UnixNano()) // at since: skipped
	f.Add(frame(3, []byte("engine error")), false, int64(0))
	f.Add(frame(9, []byte("?")), false, int64(0))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, false, int64(0)) // a 4 GiB frame, truncated
	f.Add(frame(1, []byte("no timestamp\n")), false, int64(0))
	f.Add(frame(1, append([]byte(ts(1)), bytes.Repeat([]byte("y\n"), 40000)...)), false, int64(0))
	f.Add([]byte(ts(1)+"line one\n"+ts(2)+"no end"), true, int64(0))
	f.Add([]byte{}, true, int64(-1))
	f.Fuzz(func(t *testing.T, stream []byte, tty bool, sinceNano int64) {
		w, err := OpenWriter(fuzzFile(t))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		since := time.Time{}
		if sinceNano != 0 {
			since = time.Unix(0, sinceNano)
		}
		src := func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(stream)), nil
		}
		last, _ := Pump(context.Background(), w, src, tty, At(since), since, nil)
		if last.Latest().Before(since) {
			t.Fatalf("last %v is before since %v", last, since)
		}
		b, err := os.ReadFile(w.path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("log file does not end with a newline: %q", b)
		}
		written := 0
		for _, line := range bytes.SplitAfter(b, []byte{'\n'}) {
			if len(line) == 0 {
				continue
			}
			r, err := ParseLine(line)
			if err != nil {
				t.Fatalf("the pump wrote a line that does not parse: %q: %v", line, err)
			}
			if len(r.Content) > MaxLineSize {
				t.Fatalf("record of %d bytes, more than %d", len(r.Content), MaxLineSize)
			}
			if !since.IsZero() && !r.Time.After(since) {
				t.Fatalf("record at %v, not after since %v", r.Time, since)
			}
			written += len(r.Content)
		}
		if written > len(stream) {
			t.Fatalf("%d bytes of content written from a stream of %d", written, len(stream))
		}
	})
}

// FuzzReadLog feeds a log file's bytes (anything: kubelet's, ours, a
// torn write, garbage) to ReadLog with tail and since options.
func FuzzReadLog(f *testing.F) {
	f.Add([]byte("2025-03-04T05:06:07.1Z stdout F one\n2025-03-04T05:06:07.2Z stderr P two\n2025-03-04T05:06:07.3Z stderr F three\n"), 0, int64(0))
	f.Add([]byte("2025-03-04T05:06:07.1Z stdout F one\ngarbage\n\n2025-03-04T05:06:07.2Z stdout F two"), 1, int64(0))
	f.Add([]byte("2025-03-04T05:06:07.1Z stdout F one\n2025-03-04T05:06:07.2Z stdout F two\n"), 5, time.Date(2025, 3, 4, 5, 6, 7, 150000000, time.UTC).UnixNano())
	f.Add(bytes.Repeat([]byte("x"), 5*MaxLineSize), 3, int64(0))
	f.Add([]byte("2025-03-04T05:06:07.1Z stdout F "+string(bytes.Repeat([]byte("z"), MaxLineSize))+"\n"), -1, int64(-5))
	f.Add([]byte{}, 0, int64(0))
	f.Fuzz(func(t *testing.T, content []byte, tail int, sinceNano int64) {
		path := fuzzFile(t)
		if err := os.WriteFile(path, content, 0o640); err != nil {
			t.Fatal(err)
		}
		o := ReadOptions{Tail: tail}
		if sinceNano != 0 {
			o.Since = time.Unix(0, sinceNano)
		}
		n := 0
		err := ReadLog(context.Background(), path, o, func(r Record) error {
			n++
			if r.Stream != Stdout && r.Stream != Stderr {
				return fmt.Errorf("record with stream %q", r.Stream)
			}
			if bytes.IndexByte(r.Content, '\n') >= 0 {
				return fmt.Errorf("record content with a newline: %q", r.Content)
			}
			if !o.Since.IsZero() && r.Time.Before(o.Since) {
				return fmt.Errorf("record at %v, before since %v", r.Time, o.Since)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if tail > 0 && n > tail {
			t.Fatalf("%d records with tail %d", n, tail)
		}
		if lines := bytes.Count(content, []byte{'\n'}) + 1; n > lines {
			t.Fatalf("%d records from %d lines", n, lines)
		}
	})
}
