package crilog

import "sync/atomic"

// Counters add up what Writers wrote and what they lost. One set is shared
// by all the writers of a program; pkg/cri serves it as metrics.
type Counters struct {
	// StdoutBytes and StderrBytes are the bytes of CRI records written.
	StdoutBytes, StderrBytes atomic.Uint64
	// Dropped counts WriteRecord calls whose records did not reach the
	// file (a write that failed but for want of room, or a closed
	// writer). The engine keeps the output: a pump that resumes after the
	// last written record asks for it again, so a drop is lost only if
	// the pump never resumes.
	Dropped atomic.Uint64
	// DroppedLines counts the records (lines, or pieces of a long one)
	// dropped because the log's filesystem was full (full.go): they are
	// not written later.
	DroppedLines atomic.Uint64
	// TailFetches and TimeFetches count the pumps' fetches of an engine
	// log by its tail and by time alone (Tailed).
	TailFetches, TimeFetches atomic.Uint64
}

// CountInto makes w add what it writes and drops to c (nil: stop counting).
func (w *Writer) CountInto(c *Counters) {
	w.mu.Lock()
	w.counters = c
	w.mu.Unlock()
}

// count records one write of n bytes to stream; err means it was dropped
// (n may still be > 0 for a short write).
func (c *Counters) count(stream Stream, n int, err error) {
	if c == nil {
		return
	}
	if n > 0 {
		if stream == Stderr {
			c.StderrBytes.Add(uint64(n))
		} else {
			c.StdoutBytes.Add(uint64(n))
		}
	}
	if err != nil {
		c.Dropped.Add(1)
	}
}

// dropLines counts n records dropped for want of room.
func (c *Counters) dropLines(n int) {
	if c != nil {
		c.DroppedLines.Add(uint64(n))
	}
}
