// Package crilog writes and reads container log files in the CRI format that
// kubelet reads (kubectl logs, log rotation), and pumps a Docker container's
// log stream into such a file.
//
// Each line of a CRI log file is one record:
//
//	<RFC3339Nano timestamp> <stdout|stderr> <F|P> <content>\n
//
// A line of container output too long for one record is split into several
// records tagged P (partial), the last one tagged F (full); kubelet joins them.
package crilog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cri-compose/cri-compose/pkg/cri/perm"
)

// MaxLineSize is the largest content, in bytes, of one record. Longer lines are
// split into P records. 16 KiB matches containerd's default max container log
// line size and Docker's own split of long lines into partial messages.
const MaxLineSize = 16 * 1024

// timeFormat is the layout kubelet parses CRI log timestamps with.
const timeFormat = time.RFC3339Nano

// maxTimestampLen bounds the timestamp field; the longest RFC3339Nano value is
// 35 bytes. It keeps a garbage line from turning into a huge allocation.
const maxTimestampLen = 64

// Stream names the container output stream a record came from.
type Stream string

// The two streams CRI log files carry.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

const (
	tagFull    = 'F'
	tagPartial = 'P'
)

// Record is one parsed line of a CRI log file.
type Record struct {
	Time    time.Time
	Stream  Stream
	Partial bool // tag P: the line continues in the next record
	Content []byte
}

// Writer appends records to a CRI log file. It is safe for concurrent use.
type Writer struct {
	mu     sync.Mutex
	path   string
	access perm.Access // who besides root may read the file
	f      *os.File    // nil once closed
	buf    []byte      // reused so one record becomes one write(2)

	counters *Counters // metrics.go; nil: not counted
	full     *fullDisk // full.go; nil: the last write had room
}

// OpenWriter opens (creating it and its directory if needed) the log file at
// path for appending, readable by its owner alone (OpenWriterFor).
func OpenWriter(path string) (*Writer, error) {
	return OpenWriterFor(path, perm.Owner())
}

// OpenWriterFor is OpenWriter for a file that a's group may read too.
// Container logs hold whatever the programs print, secrets included: the
// file is 0640 as containerd makes it, of a's group (root's otherwise),
// and the folders made for it are a's (0700, or 0750 for the group).
func OpenWriterFor(path string, a perm.Access) (*Writer, error) {
	f, err := openLog(path, a)
	if err != nil {
		return nil, err
	}
	return &Writer{path: path, access: a, f: f}, nil
}

// LogFileMode is the mode of a CRI log file, containerd's.
const LogFileMode fs.FileMode = 0o640

func openLog(path string, a perm.Access) (*os.File, error) {
	if err := a.MkdirAll(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	// Never through a link planted at the log path, as containerd.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW, LogFileMode)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	// A file that was there already (an older cri-compose's, another
	// group's) gets the mode and group of a new one.
	if err := setLogAccess(f, a); err != nil {
		f.Close()
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return f, nil
}

func setLogAccess(f *os.File, a perm.Access) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if gid, ok := a.GID(); ok {
		if st, isUnix := fi.Sys().(*syscall.Stat_t); !isUnix || int(st.Gid) != gid {
			if err := f.Chown(-1, gid); err != nil {
				return err
			}
		}
	}
	if fi.Mode().Perm() != LogFileMode {
		return f.Chmod(LogFileMode)
	}
	return nil
}

// WriteRecord writes content, output of stream at time ts, as one or more
// records. One trailing '\n' is stripped: it is what ends the line. Any other
// '\n' also ends a line, so the file stays one record per line. Lines longer
// than MaxLineSize are split into P records. If partial is true the (last)
// line is unfinished and all its records are tagged P.
//
// All records of one call go to the file in a single write, so a concurrent
// Reopen never splits them across files.
func (w *Writer) WriteRecord(ts time.Time, stream Stream, partial bool, content []byte) error {
	_, err := w.write(ts, stream, partial, content, false)
	return err
}

// WriteLines is WriteRecord, but each line after the first is stamped a
// nanosecond after the one before, as if each had been stamped as it was
// read: a burst of lines that arrived together keeps its order by time,
// and a time picked from one of its records (kubectl logs --since-time)
// splits it there. The pieces of one line share their stamp. last is the
// last line's stamp.
func (w *Writer) WriteLines(ts time.Time, stream Stream, partial bool, content []byte) (last time.Time, err error) {
	return w.write(ts, stream, partial, content, true)
}

func (w *Writer) write(ts time.Time, stream Stream, partial bool, content []byte, step bool) (time.Time, error) {
	if stream != Stdout && stream != Stderr {
		return ts, fmt.Errorf("write log %s: invalid stream %q", w.path, stream)
	}
	content = bytes.TrimSuffix(content, []byte{'\n'})

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		w.counters.count(stream, 0, os.ErrClosed) // metrics.go
		return ts, fmt.Errorf("write log %s: %w", w.path, os.ErrClosed)
	}
	buf := w.buf[:0]
	records := 0
	for first := true; ; first = false {
		if step && !first {
			ts = ts.Add(time.Nanosecond)
		}
		line, rest, more := bytes.Cut(content, []byte{'\n'})
		unfinished := partial && !more
		// An empty unfinished line carries nothing; an empty finished one is
		// a blank line of output and must be kept.
		if !(unfinished && len(line) == 0) {
			for {
				n := min(len(line), MaxLineSize)
				tag := byte(tagFull)
				if n < len(line) || unfinished {
					tag = tagPartial
				}
				buf = appendRecord(buf, ts, stream, tag, line[:n])
				records++
				line = line[n:]
				if len(line) == 0 {
					break
				}
			}
		}
		if !more {
			break
		}
		content = rest
	}
	// Don't pin a buffer grown by one huge record.
	if cap(buf) <= 4*MaxLineSize {
		w.buf = buf
	}
	if len(buf) == 0 {
		return ts, nil
	}
	if w.full != nil && !w.hasRoom() { // full.go
		w.dropForRoom(records, 0, nil)
		return ts, nil
	}
	n, err := w.f.Write(buf)
	if isNoSpace(err) { // full.go: dropped and counted, not retried
		w.dropForRoom(records, n, err)
		return ts, nil
	}
	w.counters.count(stream, n, err) // metrics.go
	if err != nil {
		return ts, fmt.Errorf("write log %s: %w", w.path, err)
	}
	w.roomAgain()
	return ts, nil
}

func appendRecord(dst []byte, ts time.Time, stream Stream, tag byte, content []byte) []byte {
	dst = ts.AppendFormat(dst, timeFormat)
	dst = append(dst, ' ')
	dst = append(dst, stream...)
	dst = append(dst, ' ', tag, ' ')
	dst = append(dst, content...)
	return append(dst, '\n')
}

// Reopen closes the file and opens the path again. kubelet rotates a log by
// renaming it away and then asking the runtime to reopen it; records written
// after Reopen land in the new file.
func (w *Writer) Reopen() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return fmt.Errorf("reopen log %s: %w", w.path, os.ErrClosed)
	}
	// Open before closing: if the open fails, records keep going to the old
	// file instead of being dropped.
	f, err := openLog(w.path, w.access)
	if err != nil {
		return err
	}
	old := w.f
	w.f = f
	if err := old.Close(); err != nil {
		return fmt.Errorf("close log %s: %w", w.path, err)
	}
	return nil
}

// Close closes the file. Later writes fail with os.ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return fmt.Errorf("close log %s: %w", w.path, err)
	}
	return nil
}

// ParseLine parses one line of a CRI log file, with or without its trailing
// newline. The returned Content aliases line.
func ParseLine(line []byte) (Record, error) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	var r Record
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return Record{}, errors.New("parse log line: no timestamp")
	}
	t, err := parseTime(ts)
	if err != nil {
		return Record{}, fmt.Errorf("parse log line: %w", err)
	}
	r.Time = t

	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return Record{}, errors.New("parse log line: no stream")
	}
	switch r.Stream = Stream(stream); r.Stream {
	case Stdout, Stderr:
	default:
		return Record{}, fmt.Errorf("parse log line: invalid stream %q", truncate(stream))
	}

	tags, content, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return Record{}, errors.New("parse log line: no tag")
	}
	// Tags are ':'-separated for forward compatibility; kubelet only looks
	// at the first.
	tag, _, _ := bytes.Cut(tags, []byte{':'})
	switch string(tag) {
	case string(tagFull):
	case string(tagPartial):
		r.Partial = true
	default:
		return Record{}, fmt.Errorf("parse log line: invalid tag %q", truncate(tags))
	}
	if bytes.IndexByte(content, '\n') >= 0 {
		return Record{}, errors.New("parse log line: more than one line")
	}
	r.Content = content
	return r, nil
}

func parseTime(b []byte) (time.Time, error) {
	if len(b) > maxTimestampLen {
		return time.Time{}, fmt.Errorf("timestamp too long (%d bytes)", len(b))
	}
	t, err := time.Parse(timeFormat, string(b))
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid timestamp %q: %w", b, err)
	}
	return t, nil
}

// truncate shortens b for an error message.
func truncate(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// LastTimestamp returns the timestamp of the last complete line of the log file
// at path, reading backwards from the end so a big file costs only its tail.
// A missing file or one without a complete line gives the zero time; a torn
// last line (no trailing '\n', e.g. after a crash mid-write) is ignored.
func LastTimestamp(path string) (time.Time, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("last timestamp of %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return time.Time{}, fmt.Errorf("last timestamp of %s: %w", path, err)
	}
	t, err := lastTimestamp(f, fi.Size())
	if err != nil {
		return time.Time{}, fmt.Errorf("last timestamp of %s: %w", path, err)
	}
	return t, nil
}

// backChunk is how much lastTimestamp reads per step backwards.
const backChunk = 64 * 1024

func lastTimestamp(r io.ReaderAt, size int64) (time.Time, error) {
	buf := make([]byte, backChunk)
	end := int64(-1) // offset of the '\n' ending the last complete line
	start := int64(0)
	for pos := size; pos > 0; {
		n := min(int64(len(buf)), pos)
		pos -= n
		chunk := buf[:n]
		if _, err := r.ReadAt(chunk, pos); err != nil {
			return time.Time{}, err
		}
		if end < 0 {
			i := bytes.LastIndexByte(chunk, '\n')
			if i < 0 {
				continue
			}
			end = pos + int64(i)
			chunk = chunk[:i]
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			start = pos + int64(i) + 1
			break
		}
	}
	if end < 0 {
		return time.Time{}, nil
	}
	// Only the timestamp is needed: read the head of the line.
	head := buf[:min(end-start, maxTimestampLen+1)]
	if _, err := r.ReadAt(head, start); err != nil {
		return time.Time{}, err
	}
	ts, _, ok := bytes.Cut(head, []byte{' '})
	if !ok {
		return time.Time{}, fmt.Errorf("last line at offset %d: no timestamp", start)
	}
	t, err := parseTime(ts)
	if err != nil {
		return time.Time{}, fmt.Errorf("last line at offset %d: %w", start, err)
	}
	return t, nil
}

// tailScan bounds how far back LastPosition reads: far enough for the
// last record of both streams in all but a long one-stream burst, and for
// the pieces of one long line the engine split (16 KiB each, one time).
const tailScan = 4 << 20

// LastPosition is where a pump resumes the log at path: per stream, the
// last record's time and how many records of that stream are stamped
// exactly then. A missing or empty file gives the zero Position; a stream
// with no record in the tail gets the other's mark.
func LastPosition(path string) (Position, error) {
	buf, err := wholeLinesAtEnd(path, tailScan)
	if err != nil {
		return Position{}, fmt.Errorf("last position of %s: %w", path, err)
	}
	buf = bytes.TrimSuffix(buf, []byte{'\n'})
	var pos Position
	done := [2]bool{}
	for len(buf) > 0 && !(done[0] && done[1]) {
		line := buf
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			line, buf = buf[i+1:], buf[:i]
		} else {
			buf = nil
		}
		ts, rest, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		t, err := parseTime(ts)
		if err != nil {
			continue
		}
		stream := Stdout
		if bytes.HasPrefix(rest, []byte(Stderr)) {
			stream = Stderr
		}
		i, m := 0, pos.mark(stream)
		if stream == Stderr {
			i = 1
		}
		switch {
		case done[i]:
		case m.Time.IsZero():
			// The stream's last record: an unfinished line if tagged P.
			open := bytes.HasPrefix(rest, []byte(string(stream)+" P"))
			*m = Mark{Time: t, Seen: 1, Open: open}
		case t.Equal(m.Time):
			m.Seen++
		default:
			done[i] = true
		}
	}
	switch {
	case pos.Stdout.Time.IsZero():
		pos.Stdout = pos.Stderr
	case pos.Stderr.Time.IsZero():
		pos.Stderr = pos.Stdout
	}
	return pos, nil
}

// wholeLinesAtEnd is the whole lines in the last n bytes of the file at
// path, each with its '\n': a line cut by the start of that span, and an
// unterminated last line (a write torn by a crash), are left out. A
// missing file has none.
func wholeLinesAtEnd(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	start := max(0, fi.Size()-n)
	buf := make([]byte, fi.Size()-start)
	if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
		return nil, err
	}
	if start > 0 {
		i := bytes.IndexByte(buf, '\n')
		buf = buf[i+1:] // none: i+1 is 0, and the next cut leaves nothing
	}
	return buf[:bytes.LastIndexByte(buf, '\n')+1], nil
}
