package crilog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// CopyAttach writes a container's attach stream into w as it comes, the
// way containerd's shim writes the CRI log from the container's pipe: each
// line of each stream becomes a record stamped when its end arrived, and
// a line longer than MaxLineSize is written in P pieces as soon as a piece
// is whole. tty is the container's: its stream is raw stdout, otherwise
// the engine's stdcopy frames.
//
// It returns nil once the stream ended cleanly (the container exited and
// the engine closed it), after writing each stream's unfinished last line
// as a P record, as the engine logs one. On any other end it returns the
// error and leaves the unfinished lines unwritten: whoever goes on from
// the engine's log finds them there, whole (Seam).
func CopyAttach(r io.Reader, tty bool, w *Writer) error {
	c := attachCopier{w: w}
	var err error
	if tty {
		err = c.raw(r)
	} else {
		err = c.frames(r)
	}
	if err != nil {
		return err
	}
	for i, p := range c.pending {
		if len(p) > 0 {
			if err := c.write(c.stamp(), streams[i], true, p); err != nil {
				return err
			}
		}
	}
	return nil
}

var streams = [2]Stream{Stdout, Stderr}

type attachCopier struct {
	w       *Writer
	pending [2][]byte // each stream's unfinished line
	last    time.Time // the last record's stamp
}

// stamp is when output read now arrived: never before the last record,
// so that the log's stamps are in order (WriteLines).
func (c *attachCopier) stamp() time.Time {
	now := time.Now()
	if !now.After(c.last) {
		now = c.last.Add(time.Nanosecond)
	}
	return now
}

// write writes the lines of b, stamped from ts on.
func (c *attachCopier) write(ts time.Time, s Stream, partial bool, b []byte) error {
	last, err := c.w.WriteLines(ts, s, partial, b)
	if last.After(c.last) {
		c.last = last
	}
	return err
}

// attachBuf is what one read of the stream takes at most: a frame's
// payload is one of the engine's reads of the container's pipe, 32 KiB at
// most (io.Copy's buffer), and a quiet container's writer holds no more.
const attachBuf = 32 << 10

func (c *attachCopier) frames(r io.Reader) error {
	var hdr [8]byte
	buf := make([]byte, attachBuf)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return fmt.Errorf("read attach stream: %w", err)
		}
		i := 0
		switch stdcopy.StdType(hdr[0]) {
		case stdcopy.Stdout, stdcopy.Stdin:
		case stdcopy.Stderr:
			i = 1
		default:
			return fmt.Errorf("read attach stream: unknown stream %d in frame header", hdr[0])
		}
		for size := int(binary.BigEndian.Uint32(hdr[4:])); size > 0; {
			n := min(size, len(buf))
			if _, err := io.ReadFull(r, buf[:n]); err != nil {
				return fmt.Errorf("read attach stream: %w", noEOF(err))
			}
			size -= n
			if err := c.add(i, buf[:n], c.stamp()); err != nil {
				return err
			}
		}
	}
}

func (c *attachCopier) raw(r io.Reader) error {
	buf := make([]byte, attachBuf)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := c.add(0, buf[:n], c.stamp()); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read attach stream: %w", err)
		}
	}
}

// add takes output b of stream i that arrived at now: the lines it ends
// go out in one write, and what is left of an unfinished line waits for
// its end, or for MaxLineSize of it.
func (c *attachCopier) add(i int, b []byte, now time.Time) error {
	s := streams[i]
	p := c.pending[i]
	if end := bytes.LastIndexByte(b, '\n'); end >= 0 {
		line := b[:end+1]
		if len(p) > 0 {
			p = append(p, line...)
			line = p
		}
		if err := c.write(now, s, false, line); err != nil {
			return err
		}
		now = c.last.Add(time.Nanosecond) // the next line
		p, b = p[:0], b[end+1:]
	}
	p = append(p, b...)
	rest := p
	for len(rest) >= MaxLineSize {
		if err := c.write(now, s, true, rest[:MaxLineSize]); err != nil {
			return err
		}
		rest = rest[MaxLineSize:]
	}
	c.pending[i] = append(p[:0], rest...) // copy handles the overlap
	return nil
}
