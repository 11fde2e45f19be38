package crilog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)

// readRecords parses every line of the log file at path.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end with a newline", path)
	}
	var recs []Record
	for line := range bytes.Lines(data) {
		r, err := ParseLine(line)
		if err != nil {
			t.Fatalf("%s: %v (line %q)", path, err, line)
		}
		recs = append(recs, r)
	}
	return recs
}

type rec struct {
	stream  Stream
	partial bool
	content string
}

func (r rec) String() string {
	c := r.content
	if len(c) > 40 {
		c = fmt.Sprintf("%s…(%d bytes)", c[:40], len(c))
	}
	return fmt.Sprintf("{%s %v %q}", r.stream, r.partial, c)
}

func simplify(recs []Record) []rec {
	out := make([]rec, 0, len(recs))
	for _, r := range recs {
		out = append(out, rec{r.Stream, r.Partial, string(r.Content)})
	}
	return out
}

func equalRecs(a, b []rec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWriteRecordRoundTrip(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", MaxLineSize/16*5/2) // 2.5 × MaxLineSize
	exact := strings.Repeat("x", MaxLineSize)
	tests := []struct {
		name    string
		stream  Stream
		partial bool
		content string
		want    []rec
	}{
		{"line", Stdout, false, "hello world\n", []rec{{Stdout, false, "hello world"}}},
		{"no newline", Stderr, false, "oops", []rec{{Stderr, false, "oops"}}},
		{"one newline stripped", Stdout, false, "a\n\n", []rec{{Stdout, false, "a"}, {Stdout, false, ""}}},
		{"empty line", Stdout, false, "\n", []rec{{Stdout, false, ""}}},
		{"empty partial", Stdout, true, "", nil},
		{"partial", Stdout, true, "abc", []rec{{Stdout, true, "abc"}}},
		{"embedded newlines", Stdout, true, "a\nb\nc", []rec{{Stdout, false, "a"}, {Stdout, false, "b"}, {Stdout, true, "c"}}},
		{"exactly max", Stdout, false, exact, []rec{{Stdout, false, exact}}},
		{"long", Stdout, false, long + "\n", []rec{
			{Stdout, true, long[:MaxLineSize]},
			{Stdout, true, long[MaxLineSize : 2*MaxLineSize]},
			{Stdout, false, long[2*MaxLineSize:]},
		}},
		{"long partial", Stderr, true, long, []rec{
			{Stderr, true, long[:MaxLineSize]},
			{Stderr, true, long[MaxLineSize : 2*MaxLineSize]},
			{Stderr, true, long[2*MaxLineSize:]},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "dir", "0.log")
			w, err := OpenWriter(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.WriteRecord(t0, tt.stream, tt.partial, []byte(tt.content)); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			recs := readRecords(t, path)
			for _, r := range recs {
				if !r.Time.Equal(t0) {
					t.Errorf("time = %v, want %v", r.Time, t0)
				}
			}
			if got := simplify(recs); !equalRecs(got, tt.want) {
				t.Errorf("records = %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestWriterFileFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ts := time.Date(2025, 1, 2, 3, 4, 5, 600000000, time.UTC)
	if err := w.WriteRecord(ts, Stderr, false, []byte("x y\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRecord(ts, Stdout, true, []byte("z")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "2025-01-02T03:04:05.6Z stderr F x y\n2025-01-02T03:04:05.6Z stdout P z\n"
	if string(got) != want {
		t.Errorf("file = %q, want %q", got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&^0o640 != 0 {
		t.Errorf("mode = %v, want at most 0640", perm)
	}
}

func TestWriterErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRecord(t0, "stdin", false, []byte("x")); err == nil {
		t.Error("WriteRecord with invalid stream succeeded")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRecord(t0, Stdout, false, []byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("WriteRecord after Close = %v, want os.ErrClosed", err)
	}
	if err := w.Reopen(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Reopen after Close = %v, want os.ErrClosed", err)
	}
	// A regular file where the directory should be.
	if _, err := OpenWriter(filepath.Join(path, "x.log")); err == nil {
		t.Error("OpenWriter under a file succeeded")
	}
}

func TestReopenAfterRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	rotated := path + ".20250101-000000"
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	write := func(s string) {
		t.Helper()
		if err := w.WriteRecord(t0, Stdout, false, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	write("two")
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	write("three") // still goes to the renamed file, as with kubelet
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	write("four")

	if got, want := simplify(readRecords(t, rotated)), []rec{{Stdout, false, "one"}, {Stdout, false, "two"}, {Stdout, false, "three"}}; !equalRecs(got, want) {
		t.Errorf("rotated file = %v, want %v", got, want)
	}
	if got, want := simplify(readRecords(t, path)), []rec{{Stdout, false, "four"}}; !equalRecs(got, want) {
		t.Errorf("new file = %v, want %v", got, want)
	}
}

// Concurrent writers racing a rotation: every record lands whole in exactly
// one of the two files.
func TestReopenConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	rotated := path + ".1"
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	const writers, perWriter = 4, 200
	long := strings.Repeat("z", 2*MaxLineSize+10) // three records per write
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for i := range writers {
		wg.Go(func() {
			for j := range perWriter {
				if err := w.WriteRecord(t0, Stdout, false, fmt.Appendf(nil, "%d-%d %s", i, j, long)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		if err := os.Rename(path, rotated); err != nil {
			errs <- err
			return
		}
		if err := w.Reopen(); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	for _, p := range []string{rotated, path} {
		recs := readRecords(t, p)
		if len(recs)%3 != 0 {
			t.Fatalf("%s has %d records, not whole writes", p, len(recs))
		}
		for i := 0; i < len(recs); i += 3 {
			if !recs[i].Partial || !recs[i+1].Partial || recs[i+2].Partial {
				t.Fatalf("%s: records %d..%d are not P P F", p, i, i+2)
			}
			content := string(recs[i].Content) + string(recs[i+1].Content) + string(recs[i+2].Content)
			id, rest, _ := strings.Cut(content, " ")
			if rest != long {
				t.Fatalf("%s: record %d content mangled", p, i)
			}
			if seen[id] {
				t.Fatalf("record %s written twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != writers*perWriter {
		t.Errorf("found %d records, want %d", len(seen), writers*perWriter)
	}
}

func TestParseLine(t *testing.T) {
	tests := []struct {
		line    string
		want    rec
		wantErr string
	}{
		{line: "2025-03-04T05:06:07.123456789Z stdout F hello world\n", want: rec{Stdout, false, "hello world"}},
		{line: "2025-03-04T05:06:07.123456789Z stdout F hello world", want: rec{Stdout, false, "hello world"}},
		{line: "2025-03-04T06:06:07.123456789+01:00 stderr P  two  spaces ", want: rec{Stderr, true, " two  spaces "}},
		{line: "2025-03-04T05:06:07.123456789Z stdout F ", want: rec{Stdout, false, ""}},
		{line: "2025-03-04T05:06:07.123456789Z stdout F:future hi", want: rec{Stdout, false, "hi"}},
		{line: "2025-03-04T05:06:07.123456789Z stdout F a\r", want: rec{Stdout, false, "a\r"}},
		{line: "", wantErr: "no timestamp"},
		{line: "\n", wantErr: "no timestamp"},
		{line: "garbage", wantErr: "no timestamp"},
		{line: "yesterday stdout F x", wantErr: "invalid timestamp"},
		{line: strings.Repeat("9", 100) + " stdout F x", wantErr: "timestamp too long"},
		{line: "2025-03-04T05:06:07Z", wantErr: "no timestamp"},
		{line: "2025-03-04T05:06:07Z stdout", wantErr: "no stream"},
		{line: "2025-03-04T05:06:07Z stdin F x", wantErr: "invalid stream"},
		{line: "2025-03-04T05:06:07Z stdout F", wantErr: "no tag"},
		{line: "2025-03-04T05:06:07Z stdout X x", wantErr: "invalid tag"},
		{line: "2025-03-04T05:06:07Z stdout  x", wantErr: "invalid tag"},
		{line: "2025-03-04T05:06:07Z stdout F a\nb", wantErr: "more than one line"},
	}
	for _, tt := range tests {
		r, err := ParseLine([]byte(tt.line))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseLine(%q) error = %v, want %q", tt.line, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseLine(%q): %v", tt.line, err)
			continue
		}
		if got := (rec{r.Stream, r.Partial, string(r.Content)}); got != tt.want {
			t.Errorf("ParseLine(%q) = %v, want %v", tt.line, got, tt.want)
		}
		if !r.Time.Equal(t0) {
			t.Errorf("ParseLine(%q).Time = %v, want %v", tt.line, r.Time, t0)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"2025-03-04T05:06:07.123456789Z stdout F hello world\n",
		"2025-03-04T05:06:07Z stderr P x",
		"2025-03-04T05:06:07+01:00 stdout F:x:y \n",
		"2025-03-04T05:06:07Z stdout F a\nb",
		"2025-03-04T05:06:07Z stdout",
		"",
		" ",
		"   ",
		"\n",
		"x stdout F y",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseLine(line)
		if err != nil {
			return
		}
		// What parses must survive being written back and parsed again.
		again, err := ParseLine(appendRecord(nil, r.Time, r.Stream, map[bool]byte{false: tagFull, true: tagPartial}[r.Partial], r.Content))
		if err != nil {
			t.Fatalf("reparse of %q: %v", line, err)
		}
		if !again.Time.Equal(r.Time) || again.Stream != r.Stream || again.Partial != r.Partial || !bytes.Equal(again.Content, r.Content) {
			t.Fatalf("round trip of %q: got %+v, want %+v", line, again, r)
		}
	})
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLastTimestamp(t *testing.T) {
	const (
		l1 = "2025-03-04T05:06:07.1Z stdout F one\n"
		l2 = "2025-03-04T05:06:07.2Z stderr P two\n"
	)
	t1 := time.Date(2025, 3, 4, 5, 6, 7, 100000000, time.UTC)
	t2 := t1.Add(100 * time.Millisecond)
	longLine := "2025-03-04T05:06:07.3Z stdout F " + strings.Repeat("y", 3*backChunk) + "\n"
	tests := []struct {
		name    string
		content string
		want    time.Time
		wantErr bool
	}{
		{name: "empty"},
		{name: "only torn", content: "2025-03-04T05:06:07.1Z stdout F one"},
		{name: "one line", content: l1, want: t1},
		{name: "two lines", content: l1 + l2, want: t2},
		{name: "torn last line", content: l1 + "2025-03-04T05:06:07.9Z stdout F to", want: t1},
		{name: "torn after two", content: l1 + l2 + "2025", want: t2},
		{name: "long last line", content: l1 + longLine, want: t2.Add(100 * time.Millisecond)},
		{name: "long torn line", content: l2 + strings.Repeat("y", 3*backChunk), want: t2},
		{name: "garbage last line", content: l1 + "garbage\n", wantErr: true},
		{name: "empty last line", content: l1 + "\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LastTimestamp(writeFile(t, tt.content))
			if tt.wantErr {
				if err == nil {
					t.Errorf("LastTimestamp = %v, want error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(tt.want) {
				t.Errorf("LastTimestamp = %v, want %v", got, tt.want)
			}
		})
	}

	got, err := LastTimestamp(filepath.Join(t.TempDir(), "missing.log"))
	if err != nil || !got.IsZero() {
		t.Errorf("LastTimestamp of missing file = %v, %v; want zero, nil", got, err)
	}
}

// countingReaderAt counts the bytes read through it.
type countingReaderAt struct {
	r io.ReaderAt
	n int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

func TestLastTimestampBigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("log line ", 10))
	var last time.Time
	for i := range 30000 { // ~3.5 MiB
		last = t0.Add(time.Duration(i) * time.Millisecond)
		if err := w.WriteRecord(last, Stdout, false, line); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := LastTimestamp(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(last) {
		t.Errorf("LastTimestamp = %v, want %v", got, last)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 1<<20 {
		t.Fatalf("test file is only %d bytes", fi.Size())
	}
	c := &countingReaderAt{r: f}
	if _, err := lastTimestamp(c, fi.Size()); err != nil {
		t.Fatal(err)
	}
	if c.n > 2*backChunk {
		t.Errorf("read %d bytes of a %d-byte file to find the last line", c.n, fi.Size())
	}
}

// The file written by a Writer reads back line by line with bufio, as kubelet
// does, with P records joined into the original line.
func TestKubeletStyleJoin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := []string{"short", strings.Repeat("ab", MaxLineSize+3), "", "end"}
	for _, l := range lines {
		if err := w.WriteRecord(t0, Stdout, false, []byte(l+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var got []string
	var cur []byte
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		cur = append(cur, r.Content...)
		if !r.Partial {
			got = append(got, string(cur))
			cur = nil
		}
	}
	if strings.Join(got, "|") != strings.Join(lines, "|") {
		t.Errorf("joined lines differ: got %d lines, want %d", len(got), len(lines))
	}
}
