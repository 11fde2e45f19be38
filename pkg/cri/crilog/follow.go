package crilog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// ReadOptions choose what ReadLog sends.
type ReadOptions struct {
	// Since: only records stamped at or after it (the zero time: all).
	Since time.Time
	// Tail > 0: only the last Tail records (of those since Since) that
	// the file holds when ReadLog starts.
	Tail int
	// Follow: go on with the records written after that, until Done says
	// nothing more will come or ctx ends.
	Follow bool
	// Done tells a follower, whenever it has read everything written so
	// far, whether the writer has finished for good (the container exited
	// and its output is all in the file); ReadLog then reads what is left
	// and returns. nil: never.
	Done func() bool
	// Poll is how often a follower looks for new records and for a
	// rotated file (default DefaultPoll).
	Poll time.Duration
}

// DefaultPoll is how often ReadLog checks a followed file.
const DefaultPoll = 100 * time.Millisecond

// maxPending bounds a line that is still being written (no '\n' yet): a
// record is at most MaxLineSize of content plus its header, so anything
// much longer is garbage, dropped up to its next '\n'.
const maxPending = 4 * MaxLineSize

// ReadLog sends the records of the CRI log file at path to emit, in file
// order. Lines that are not valid records are skipped; a line not yet
// finished ('\n' not written yet) is sent once it is.
//
// A follower survives kubelet's rotation: when the file at path is replaced
// (renamed away, then reopened by the pump), it reads the old file to its
// end and goes on with the new one from its start. A file truncated in
// place is read again from its start. A file that does not exist yet is
// waited for when following (and is empty otherwise).
//
// A record's Content is valid only until emit returns.
//
// It returns nil when done, ctx.Err() when ctx ended, or emit's error.
func ReadLog(ctx context.Context, path string, o ReadOptions, emit func(Record) error) error {
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	r := &logReader{ctx: ctx, path: path, o: o, emit: emit}
	defer r.close()
	for r.f == nil {
		err := r.open()
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if !o.Follow {
			return nil
		}
		if r.done() {
			// Exited without ever writing a file: read it if it
			// appeared meanwhile.
			if err := r.open(); err != nil {
				return nil
			}
			break
		}
		if err := r.sleep(); err != nil {
			return err
		}
	}
	if o.Tail > 0 {
		if err := r.tail(); err != nil {
			return err
		}
	}
	if err := r.drain(); err != nil || !o.Follow {
		return err
	}
	for {
		if r.done() {
			// Everything was written before Done said so: read it.
			if err := r.drain(); err != nil {
				return err
			}
			return r.switchIfRotated(true)
		}
		if err := r.switchIfRotated(false); err != nil {
			return err
		}
		if err := r.sleep(); err != nil {
			return err
		}
		if err := r.drain(); err != nil {
			return err
		}
	}
}

type logReader struct {
	ctx  context.Context
	path string
	o    ReadOptions
	emit func(Record) error

	f       *os.File
	br      *bufio.Reader
	off     int64  // bytes of f read (complete lines and pending)
	pending []byte // an unfinished last line
	discard bool   // dropping an overlong line up to its '\n'
}

func (r *logReader) open() error {
	f, err := os.Open(r.path)
	if err != nil {
		return fmt.Errorf("read log %s: %w", r.path, err)
	}
	r.close()
	r.f, r.br, r.off, r.pending, r.discard = f, bufio.NewReaderSize(f, 64*1024), 0, nil, false
	return nil
}

func (r *logReader) close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

func (r *logReader) done() bool { return r.o.Done != nil && r.o.Done() }

func (r *logReader) sleep() error {
	t := time.NewTimer(r.o.Poll)
	defer t.Stop()
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-t.C:
		return nil
	}
}

// lines calls fn with every complete line of f from the current position
// to its end, keeping an unfinished last line for later.
func (r *logReader) lines(fn func(line []byte) error) error {
	for {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		chunk, err := r.br.ReadSlice('\n')
		r.off += int64(len(chunk))
		switch {
		case err == nil:
			line := chunk
			if len(r.pending) > 0 {
				line = append(r.pending, chunk...)
				r.pending = r.pending[:0]
			}
			if r.discard {
				r.discard = false
				continue
			}
			if err := fn(line); err != nil {
				return err
			}
		case errors.Is(err, bufio.ErrBufferFull) || errors.Is(err, io.EOF):
			if !r.discard {
				r.pending = append(r.pending, chunk...)
			}
			if len(r.pending) > maxPending {
				r.pending, r.discard = r.pending[:0], true
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
		default:
			return fmt.Errorf("read log %s: %w", r.path, err)
		}
	}
}

// want reports whether a record passes the Since filter.
func (r *logReader) want(rec Record) bool {
	return r.o.Since.IsZero() || !rec.Time.Before(r.o.Since)
}

// drain sends every complete record from the current position on.
func (r *logReader) drain() error {
	if r.f == nil {
		return nil
	}
	if fi, err := r.f.Stat(); err == nil && fi.Size() < r.off {
		// Truncated in place (copytruncate): start over.
		if _, err := r.f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read log %s: %w", r.path, err)
		}
		r.br.Reset(r.f)
		r.off, r.pending, r.discard = 0, nil, false
	}
	return r.lines(func(line []byte) error {
		rec, err := ParseLine(line)
		if err != nil || !r.want(rec) {
			return nil
		}
		return r.emit(rec)
	})
}

// tail reads the file as it is now and sends its last Tail records.
func (r *logReader) tail() error {
	ring := make([]Record, 0, min(r.o.Tail, 1024))
	start := 0 // index of the oldest record once the ring is full
	err := r.lines(func(line []byte) error {
		rec, err := ParseLine(line)
		if err != nil || !r.want(rec) {
			return nil
		}
		rec.Content = bytes.Clone(rec.Content)
		if len(ring) < r.o.Tail {
			ring = append(ring, rec)
			return nil
		}
		ring[start] = rec
		start = (start + 1) % len(ring)
		return nil
	})
	if err != nil {
		return err
	}
	for i := range ring {
		if err := r.emit(ring[(start+i)%len(ring)]); err != nil {
			return err
		}
	}
	return nil
}

// switchIfRotated moves to the file now at path when it is not the one
// being read, after reading the old one to its end (the writer may have
// added to it until it reopened). With final, the new file is read to its
// end too.
func (r *logReader) switchIfRotated(final bool) error {
	cur, err := os.Stat(r.path)
	if err != nil {
		return nil // renamed away, not reopened yet: go on with the old file
	}
	old, err := r.f.Stat()
	if err != nil || os.SameFile(cur, old) {
		return nil
	}
	if err := r.drain(); err != nil {
		return err
	}
	if err := r.open(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if final {
		return r.drain()
	}
	return nil
}
