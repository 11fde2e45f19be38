package crilog

import (
	"path/filepath"
	"testing"
	"time"
)

func TestCounters(t *testing.T) {
	w, err := OpenWriter(filepath.Join(t.TempDir(), "c.log"))
	if err != nil {
		t.Fatal(err)
	}
	var c Counters
	w.CountInto(&c)
	ts := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	line := len(ts.Format(timeFormat)) + len(" stdout F ") + len("hello\n")
	if err := w.WriteRecord(ts, Stdout, false, []byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRecord(ts, Stderr, false, []byte("a\nb\n")); err != nil {
		t.Fatal(err)
	}
	if got := c.StdoutBytes.Load(); got != uint64(line) {
		t.Errorf("stdout bytes %d, want %d", got, line)
	}
	if got, want := c.StderrBytes.Load(), uint64(2*(len(ts.Format(timeFormat))+len(" stderr F a\n"))); got != want {
		t.Errorf("stderr bytes %d, want %d", got, want)
	}
	w.Close()
	if err := w.WriteRecord(ts, Stdout, false, []byte("lost\n")); err == nil {
		t.Fatal("write to a closed writer succeeded")
	}
	if c.Dropped.Load() != 1 || c.StdoutBytes.Load() != uint64(line) {
		t.Errorf("after a write to a closed writer: dropped %d, stdout %d", c.Dropped.Load(), c.StdoutBytes.Load())
	}
	// A writer counts nothing until told where.
	w2, _ := OpenWriter(filepath.Join(t.TempDir(), "d.log"))
	defer w2.Close()
	if err := w2.WriteRecord(ts, Stdout, false, []byte("x\n")); err != nil {
		t.Fatal(err)
	}
}
