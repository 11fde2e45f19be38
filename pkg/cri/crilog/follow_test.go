package crilog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// collect runs ReadLog in the background and gathers the contents it sends.
type collector struct {
	mu   sync.Mutex
	got  []string
	done chan error
}

func startRead(ctx context.Context, path string, o ReadOptions) *collector {
	c := &collector{done: make(chan error, 1)}
	go func() {
		c.done <- ReadLog(ctx, path, o, func(r Record) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			tag := "F"
			if r.Partial {
				tag = "P"
			}
			c.got = append(c.got, fmt.Sprintf("%s %s %s", r.Stream, tag, r.Content))
			return nil
		})
	}()
	return c
}

func (c *collector) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// waitLines waits until c has n lines and returns them.
func (c *collector) waitLines(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := c.lines()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s %d lines, want %d: %q", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// follower is a ReadOptions.Done that counts its calls: a follower calls
// Done whenever it has read all there was (or, waiting for the file, found
// none), so the tests know when it has seen a state instead of guessing
// with a sleep.
type follower struct {
	calls    atomic.Int64
	finished atomic.Bool
}

func (f *follower) done() bool {
	f.calls.Add(1)
	return f.finished.Load()
}

// caughtUp waits until the follower has called Done twice more: between
// the two it has looked at the file (read on, checked for a rotation)
// after everything written before caughtUp was called.
func (f *follower) caughtUp(t *testing.T) {
	t.Helper()
	want := f.calls.Load() + 2
	deadline := time.Now().Add(10 * time.Second)
	for f.calls.Load() < want {
		if time.Now().After(deadline) {
			t.Fatal("the follower did not look at the file again within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *collector) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-c.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("ReadLog did not return within 10s")
		return nil
	}
}

func writeN(t *testing.T, w *Writer, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := w.WriteRecord(t0.Add(time.Duration(i)*time.Second), Stdout, false, []byte(fmt.Sprintf("line %d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

func want(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("stdout F line %d", i))
	}
	return out
}

func TestReadLogSinceTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeN(t, w, 1, 10)
	// A line that is not a record, and one that is not finished yet.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("garbage\n" + t0.Add(11*time.Second).Format(time.RFC3339Nano) + " stdout F unfinis")
	f.Close()

	for _, tc := range []struct {
		name string
		o    ReadOptions
		want []string
	}{
		{"all", ReadOptions{}, want(1, 10)},
		{"since", ReadOptions{Since: t0.Add(7 * time.Second)}, want(7, 10)},
		{"since exact nanosecond", ReadOptions{Since: t0.Add(7*time.Second + 1)}, want(8, 10)},
		{"tail", ReadOptions{Tail: 3}, want(8, 10)},
		{"tail more than there is", ReadOptions{Tail: 50}, want(1, 10)},
		{"since and tail", ReadOptions{Since: t0.Add(9 * time.Second), Tail: 5}, want(9, 10)},
		{"since after everything", ReadOptions{Since: t0.Add(time.Hour)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startRead(context.Background(), path, tc.o)
			if err := c.wait(t); err != nil {
				t.Fatal(err)
			}
			if got := c.lines(); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}

	// A missing file is empty unless followed.
	c := startRead(context.Background(), filepath.Join(t.TempDir(), "none.log"), ReadOptions{})
	if err := c.wait(t); err != nil || len(c.lines()) != 0 {
		t.Errorf("missing file: %v %q", err, c.lines())
	}
}

// TestReadLogFollow: a follower gets what is written after it started,
// a line written in two pieces once, and across a rotation (rename, then
// the writer reopens the path) every record exactly once; it ends when
// Done says so, after reading the rest.
func TestReadLogFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeN(t, w, 1, 5)

	var fl follower
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := startRead(ctx, path, ReadOptions{Tail: 2, Follow: true, Poll: 5 * time.Millisecond, Done: fl.done})
	if got := c.waitLines(t, 2); !slices.Equal(got, want(4, 5)) {
		t.Fatalf("tail 2: %q", got)
	}
	writeN(t, w, 6, 6)
	if got := c.waitLines(t, 3); got[2] != "stdout F line 6" {
		t.Fatalf("after a new line: %q", got)
	}

	// One record written in two pieces: the follower has read the first
	// (and keeps it pending) before the second is written.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(t0.Add(7*time.Second).Format(time.RFC3339Nano) + " stdout F li")
	fl.caughtUp(t)
	f.WriteString("ne 7\n")
	f.Close()
	c.waitLines(t, 4)

	// kubelet's rotation: rename, a few more records into the old file,
	// which the follower reads while the path is missing, then the writer
	// reopens the path.
	if err := os.Rename(path, path+".20250304-050607"); err != nil {
		t.Fatal(err)
	}
	writeN(t, w, 8, 9)
	c.waitLines(t, 6)
	fl.caughtUp(t)
	if err := w.Reopen(); err != nil {
		t.Fatal(err)
	}
	writeN(t, w, 10, 12)
	c.waitLines(t, 9)

	writeN(t, w, 13, 14)
	fl.finished.Store(true)
	if err := c.wait(t); err != nil {
		t.Fatalf("ReadLog: %v", err)
	}
	if got := c.lines(); !slices.Equal(got, want(4, 14)) {
		t.Errorf("followed %q, want %q", got, want(4, 14))
	}
}

// TestReadLogFollowWaitsForFile: following a log that does not exist yet
// waits for it; ctx ends the wait.
func TestReadLogFollowWaitsForFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "later.log")
	ctx, cancel := context.WithCancel(context.Background())
	var waiting follower
	c := startRead(ctx, path, ReadOptions{Follow: true, Poll: 5 * time.Millisecond, Done: waiting.done})
	waiting.caughtUp(t) // it has found no file, and waits
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	writeN(t, w, 1, 2)
	c.waitLines(t, 2)
	cancel()
	if err := c.wait(t); err != context.Canceled {
		t.Errorf("after cancel: %v, want context.Canceled", err)
	}

	// Truncated in place: read again from the start.
	var finished atomic.Bool
	c = startRead(context.Background(), path, ReadOptions{Follow: true, Poll: 5 * time.Millisecond, Done: finished.Load})
	c.waitLines(t, 2)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	writeN(t, w, 3, 3)
	c.waitLines(t, 3)
	finished.Store(true)
	if err := c.wait(t); err != nil {
		t.Fatal(err)
	}
	if got := c.lines(); !slices.Equal(got, want(1, 3)) {
		t.Errorf("after truncation: %q", got)
	}
}
