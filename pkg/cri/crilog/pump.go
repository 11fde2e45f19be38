package crilog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// Source opens a container's log stream as the engine serves it for
// GET /containers/{id}/logs?follow=1&stdout=1&stderr=1&timestamps=1&since=<since>.
type Source func(ctx context.Context, since time.Time) (io.ReadCloser, error)

// maxPiece caps how much of one log message is held in memory; a longer
// message is read and written in pieces of this size.
const maxPiece = 64 * 1024

// Pump copies the container's log stream from src into w until the stream
// ends (the container exited and all its output was delivered; err is nil) or
// ctx is cancelled (err is ctx.Err()).
//
// tty selects the stream format: Docker multiplexes stdout and stderr in
// 8-byte-header frames unless the container has a TTY, in which case the
// stream is raw stdout. Every message starts with its RFC3339Nano timestamp
// and a space.
//
// The engine is asked for messages from since on (its filter is
// inclusive; Resume picks it). Of each stream, the messages stamped before
// from's mark for it are skipped, and so are the first Seen messages
// stamped exactly then: they were written already. (The pieces of a line
// the engine split share their time; each stream's messages are stamped in
// order, but the two streams' may reach the engine's log out of order.)
//
// last is the position after the last message written, or from if none
// was: pass it as from to resume.
//
// Every message written is counted through gate, if not nil, so that the
// container is held back while the pump is behind (Gate).
func Pump(ctx context.Context, w *Writer, src Source, tty bool, from Position, since time.Time, gate *Gate) (last Position, err error) {
	rc, err := src(ctx, since)
	if err != nil {
		return from, fmt.Errorf("open log stream: %w", err)
	}
	// Closing the stream is what unblocks a Read waiting for output of a
	// quiet container when ctx is cancelled.
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer func() {
		if stop() {
			rc.Close()
		}
	}()

	p := &pump{ctx: ctx, write: w.WriteRecord, gate: gate, from: from, last: from}
	err = p.decode(rc, tty)
	if ctx.Err() != nil {
		// Whatever the read returned, it was caused by the cancellation.
		return p.last, ctx.Err()
	}
	return p.last, err
}

// decode reads a log stream of the engine's (decode's tty as Pump's) and
// hands every piece of a message to p.piece.
func (p *pump) decode(rc io.Reader, tty bool) error {
	if tty {
		// ReadSlice cuts a long line into pieces of the buffer's size.
		return p.raw(bufio.NewReaderSize(rc, maxPiece))
	}
	// Frames carry their length and are read whole with io.ReadFull
	// from the response body, which the HTTP client buffers already:
	// no buffer of our own, so the pump of a quiet container (most of
	// them, most of the time) holds no 64 KiB (BENCHMARKS.md, memory).
	return p.multiplexed(rc)
}

// Mark is where a pump is in one stream of a container's log: the time of
// the last message written, and how many stamped exactly then were.
type Mark struct {
	Time time.Time
	Seen int
	// Open: that message was a piece of a line the engine split, so the
	// stream's next messages carry the same time however late they come.
	Open bool
}

// Position is where a pump is in a container's log, per stream.
type Position struct {
	Stdout, Stderr Mark
}

func (p *Position) mark(s Stream) *Mark {
	if s == Stderr {
		return &p.Stderr
	}
	return &p.Stdout
}

// resumeFloor: a stream with nothing pending still resumes at most this
// long before the other's mark, for output the attach stream has not
// counted yet but the engine stamped earlier (the attach stream is read
// freely then, but this server may be slow to run: 50 ms lost a line under
// a loaded CI run).
const resumeFloor = 2 * time.Second

// Resume is the since to fetch from after pos. A stream with output still
// to come (pending), or in the middle of a split line, resumes at its own
// mark, for its next message is stamped after that one (or with it). A
// stream with nothing pending resumes at most resumeFloor before the latest
// mark, unless holding: while the gate holds the attach stream, output the
// engine logged may not be counted yet, so no stream is taken for quiet.
// A stream with no mark yet starts at the beginning.
func Resume(pos Position, pendingOut, pendingErr, holding bool) time.Time {
	latest := pos.Latest()
	since := latest
	for _, m := range []struct {
		mark    Mark
		pending bool
	}{{pos.Stdout, pendingOut}, {pos.Stderr, pendingErr}} {
		t := m.mark.Time
		if !holding && !m.pending && !m.mark.Open && t.Before(latest.Add(-resumeFloor)) {
			t = latest.Add(-resumeFloor)
		}
		if t.Before(since) {
			since = t
		}
	}
	return since
}

type pump struct {
	ctx     context.Context
	write   func(ts time.Time, s Stream, partial bool, b []byte) error // Writer.WriteRecord
	gate    *Gate
	from    Position
	skipped [2]int // messages of each stream stamped at from's mark skipped so far
	last    Position
	next    Mark // last's mark of the stream, once the message being copied is written

	// The message being copied, which may span several pieces.
	ts   time.Time
	skip bool // written before
	buf  []byte
}

// multiplexed decodes Docker's stdcopy framing: byte 0 is the stream, bytes
// 4..7 the big-endian payload length. Each frame is one log message.
func (p *pump) multiplexed(r io.Reader) error {
	var hdr [8]byte
	for p.ctx.Err() == nil {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("read log stream frame header: %w", err)
		}
		size := int64(binary.BigEndian.Uint32(hdr[4:]))
		var stream Stream
		switch stdcopy.StdType(hdr[0]) {
		case stdcopy.Stdout, stdcopy.Stdin: // stdcopy also treats stdin as stdout
			stream = Stdout
		case stdcopy.Stderr:
			stream = Stderr
		case stdcopy.Systemerr:
			msg, err := io.ReadAll(io.LimitReader(r, min(size, 4096)))
			if err != nil {
				return fmt.Errorf("read log stream error: %w", err)
			}
			return fmt.Errorf("log stream: engine error: %s", msg)
		default:
			return fmt.Errorf("read log stream: unknown stream %d in frame header", hdr[0])
		}
		for first := true; size > 0; first = false {
			n := min(size, maxPiece)
			if int64(cap(p.buf)) < n {
				p.buf = make([]byte, n)
			}
			piece := p.buf[:n]
			if _, err := io.ReadFull(r, piece); err != nil {
				return fmt.Errorf("read log stream frame: %w", noEOF(err))
			}
			size -= n
			if err := p.piece(stream, piece, first); err != nil {
				return err
			}
		}
	}
	return nil
}

// raw decodes a TTY container's stream: stdout only, one message per line.
// (Docker's own partial messages, which lack the '\n', run into the next
// message's timestamp here; a TTY stream has no framing to tell them apart.)
func (p *pump) raw(r *bufio.Reader) error {
	first := true // the next piece starts a line, hence a timestamp
	for p.ctx.Err() == nil {
		// ReadSlice stops at the buffer size (maxPiece), which caps a long
		// line's piece.
		piece, err := r.ReadSlice('\n')
		if len(piece) > 0 {
			if perr := p.piece(Stdout, piece, first); perr != nil {
				return perr
			}
			first = piece[len(piece)-1] == '\n'
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case err == io.EOF:
			return nil
		default:
			return fmt.Errorf("read log stream: %w", err)
		}
	}
	return nil
}

// piece writes one piece of a message; the first piece of a message starts
// with its timestamp.
func (p *pump) piece(stream Stream, b []byte, first bool) error {
	if first {
		ts, rest, ok := bytes.Cut(b, []byte{' '})
		if !ok {
			return fmt.Errorf("log stream message without timestamp: %q", truncate(b))
		}
		t, err := parseTime(ts)
		if err != nil {
			return fmt.Errorf("log stream message: %w", err)
		}
		p.ts, b = t, rest
		from, last := p.from.mark(stream), p.last.mark(stream)
		si := 0
		if stream == Stderr {
			si = 1
		}
		switch {
		case t.Before(from.Time):
			p.skip = true
		case t.Equal(from.Time) && p.skipped[si] < from.Seen:
			p.skip = true
			p.skipped[si]++
		default:
			p.skip = false
			// Where the pump is once this message is written.
			if t.Equal(last.Time) {
				p.next = Mark{Time: t, Seen: last.Seen + 1}
			} else {
				p.next = Mark{Time: t, Seen: 1}
			}
		}
	}
	if p.skip {
		return nil
	}
	// Docker ends a complete line with '\n'; without it the message (or this
	// piece of a capped one) is partial.
	partial := len(b) == 0 || b[len(b)-1] != '\n'
	if err := p.write(p.ts, stream, partial, b); err != nil {
		return err
	}
	p.next.Open = partial
	*p.last.mark(stream) = p.next
	if p.gate != nil {
		p.gate.Pumped(stream, p.ts, Cost(b))
	}
	return nil
}

// noEOF turns a clean EOF inside a frame into the truncation it is.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Latest is the later of the two streams' mark times.
func (p Position) Latest() time.Time {
	if p.Stderr.Time.After(p.Stdout.Time) {
		return p.Stderr.Time
	}
	return p.Stdout.Time
}

// At is the position of a log whose last record of each stream was the
// one message stamped t.
func At(t time.Time) Position {
	return Position{Stdout: Mark{Time: t, Seen: 1}, Stderr: Mark{Time: t, Seen: 1}}
}
