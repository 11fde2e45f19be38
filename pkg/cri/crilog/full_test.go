package crilog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// captureKlog sends klog's output to a buffer for the rest of the test.
func captureKlog(t *testing.T) *syncBuffer {
	t.Helper()
	buf := &syncBuffer{}
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	klog.SetOutputBySeverity("INFO", buf) // errors too, once
	t.Cleanup(func() {
		klog.Flush()
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	})
	return buf
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFullDiskDevFull: every write to /dev/full fails with ENOSPC: the
// records are dropped and counted, WriteRecord does not fail (the pump
// goes on), and the log says so once, not once per line.
func TestFullDiskDevFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	logs := captureKlog(t)
	w, err := OpenWriter("/dev/full")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var c Counters
	w.CountInto(&c)
	ts := time.Now()
	for i := 0; i < 50; i++ {
		if err := w.WriteRecord(ts, Stdout, false, []byte(fmt.Sprintf("line %d\n", i))); err != nil {
			t.Fatalf("WriteRecord on a full disk: %v, want the line dropped", err)
		}
	}
	// A message of two lines is two records.
	if err := w.WriteRecord(ts, Stderr, false, []byte("a\nb\n")); err != nil {
		t.Fatal(err)
	}
	if got := c.DroppedLines.Load(); got != 52 {
		t.Errorf("dropped lines %d, want 52", got)
	}
	if c.Dropped.Load() != 0 || c.StdoutBytes.Load() != 0 {
		t.Errorf("dropped writes %d, stdout bytes %d, want 0 and 0 (a full disk is counted in DroppedLines only)", c.Dropped.Load(), c.StdoutBytes.Load())
	}
	klog.Flush()
	if n := strings.Count(logs.String(), "filesystem is full"); n != 1 {
		t.Errorf("%d log lines say the log is full, want 1:\n%s", n, logs)
	}
}

// TestFullDiskResumes: a log on a small tmpfs that fills (needs root to
// mount it). Lines that fit are written whole, those that do not are
// dropped and counted, no record is torn, and writing resumes by itself
// once there is room again.
func TestFullDiskResumes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	logs := captureKlog(t)
	path := filepath.Join(dir, "c.log")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var c Counters
	w.CountInto(&c)

	// The log has one line, then a filler takes every free block.
	next := 0
	write := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := w.WriteRecord(time.Now(), Stdout, false, []byte(fmt.Sprintf("line %d %s\n", next, strings.Repeat("x", next%50)))); err != nil {
				t.Fatalf("WriteRecord: %v", err)
			}
			next++
		}
	}
	write(1)
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	write(200) // more than the file's last block holds
	dropped := c.DroppedLines.Load()
	if dropped == 0 {
		t.Fatalf("no line dropped on a full filesystem")
	}
	got := readLines(t, path)
	if uint64(len(got))+dropped != uint64(next) {
		t.Errorf("%d lines written and %d dropped of %d", len(got), dropped, next)
	}
	// What was written is a prefix of what was sent: once full, nothing
	// more fits (no flip between dropping and writing).
	for i, l := range got {
		if !strings.HasPrefix(l, fmt.Sprintf("line %d ", i)) {
			t.Fatalf("line %d of the log is %q", i, l)
		}
	}

	// Room again: the next line is written, and what was dropped is not.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	first := next
	write(3)
	got = readLines(t, path)
	if tail := got[len(got)-3:]; !strings.HasPrefix(tail[0], fmt.Sprintf("line %d ", first)) {
		t.Errorf("after room was made the log ends with %q, want lines %d to %d", tail, first, first+2)
	}
	if c.DroppedLines.Load() != dropped {
		t.Errorf("dropped lines went from %d to %d with room on the disk", dropped, c.DroppedLines.Load())
	}
	klog.Flush()
	out := logs.String()
	if n := strings.Count(out, "filesystem is full"); n != 1 {
		t.Errorf("%d log lines say the log is full, want 1:\n%s", n, out)
	}
	if want := fmt.Sprintf("droppedLines=%d", dropped); strings.Count(out, "takes lines again") != 1 || !strings.Contains(out, want) {
		t.Errorf("the log does not say once that the file takes lines again with %s:\n%s", want, out)
	}
}

// fill writes a file until its filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 4096)
	for {
		if _, err := f.Write(b); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// readLines reads a CRI log and checks every line is one whole record.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("the log ends in a torn record: %q", b[max(0, len(b)-80):])
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if l == "" {
			continue
		}
		r, err := ParseLine([]byte(l))
		if err != nil {
			t.Errorf("log line %q: %v", l, err)
			continue
		}
		out = append(out, string(r.Content))
	}
	return out
}
