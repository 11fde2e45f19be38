package crilog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Seam is the position in the engine's log (src) after the last record of
// the CRI log at path, for a pump that takes the log over: after a restart
// of this server, or after the attach stream that wrote the log broke.
//
// Records written from the engine's log (Pump) carry the engine's stamps,
// and a stream whose last record's time is stamped on one of the engine's
// messages resumes by time and count, as LastPosition says. Records
// written from the attach stream (CopyAttach) are stamped when they
// arrived, which is no stamp of the engine's: the engine stamps a message
// when its log copier reads it, about when the same bytes go to the attach
// stream, but output queued for a slow reader arrives later. Such a
// stream resumes after the message of the engine's log where its last
// bytes end, found by content: the end of the CRI log's records of that
// stream, matched against the engine's messages at each message's end.
// Where several places match (a line repeated), the one the engine stamped
// last no later than the record's arrival wins, give or take seamClock.
// Where none does (output the engine logged differently: it replaces
// invalid UTF-8; or a log rotated away), the stream resumes after what the
// engine stamped up to the last record's arrival.
//
// A log that is missing or empty is taken for one kubelet just rotated
// (renamed away to <path>.<time> and asked the runtime to reopen): the
// newest such file's end is the seam. Without one, the zero Position:
// from the start.
func Seam(ctx context.Context, path string, src Source, tty bool) (Position, error) {
	t, err := readTail(path)
	if err == nil && t.first.IsZero() {
		if rotated := lastRotated(path); rotated != "" {
			path = rotated
			t, err = readTail(path)
		}
	}
	if err != nil || t.first.IsZero() {
		return Position{}, err
	}
	exact, err := LastPosition(path)
	if err != nil {
		return Position{}, err
	}
	msgs, err := t.fetch(ctx, src, tty)
	if err != nil {
		return Position{}, err
	}
	var pos Position
	quiet := -1 // a stream without a record near the end
	for i, s := range streams {
		m := pos.mark(s)
		switch {
		case len(t.ours[i]) == 0:
			quiet = i
		case msgs[i].stamped(t.last[i]):
			*m = *exact.mark(s)
		default:
			*m = msgs[i].match(t.ours[i], t.last[i])
		}
	}
	if quiet >= 0 {
		// The attach stream brings both streams in the engine's order, so
		// what this one wrote after the other's last record was stamped
		// after that record's message was (give or take the two copiers'
		// skew); what it wrote before is in an older part of the log.
		other := pos.mark(streams[1-quiet])
		*pos.mark(streams[quiet]) = Mark{Time: other.Time.Add(-seamClock)}
	}
	return pos, nil
}

const (
	// seamScan is how much of the CRI log's end Seam reads.
	seamScan = 256 << 10
	// seamMatch is how many of a stream's last bytes are matched.
	seamMatch = 16 << 10
	// seamLead is how long before a record's arrival the engine may have
	// stamped it: output the engine queued for a slow attach reader.
	seamLead = 10 * time.Second
	// seamClock is how much later than its arrival the engine may stamp
	// a message: its log copier and the attach stream read the same
	// output apart.
	seamClock = 10 * time.Millisecond
)

// tail is the end of a CRI log, per stream.
type tail struct {
	ours  [2][]byte    // the last output of each stream, lines with their '\n'
	last  [2]time.Time // the stream's last record's time
	first time.Time    // the first record's time (zero: no record)
}

func readTail(path string) (tail, error) {
	var t tail
	buf, err := wholeLinesAtEnd(path, seamScan)
	if err != nil {
		return t, fmt.Errorf("seam of %s: %w", path, err)
	}
	for len(buf) > 0 {
		line, rest, _ := bytes.Cut(buf, []byte{'\n'})
		buf = rest
		r, err := ParseLine(line)
		if err != nil {
			continue
		}
		i := index(r.Stream)
		if t.first.IsZero() {
			t.first = r.Time
		}
		t.last[i] = r.Time
		t.ours[i] = append(t.ours[i], r.Content...)
		if !r.Partial {
			t.ours[i] = append(t.ours[i], '\n')
		}
	}
	for i := range t.ours {
		if n := len(t.ours[i]); n > seamMatch {
			t.ours[i] = t.ours[i][n-seamMatch:]
		}
	}
	return t, nil
}

// engineMsgs is one stream's messages of the engine's log, in order.
type engineMsgs struct {
	text []byte      // their content, one after the other
	ends []int       // where each ends in text
	ts   []time.Time // and its stamp
}

func (m *engineMsgs) stamped(t time.Time) bool {
	for _, ts := range m.ts {
		if ts.Equal(t) {
			return true
		}
	}
	return false
}

// errSeamRead ends a fetch once its messages are past what Seam needs.
var errSeamRead = errors.New("read enough")

// fetch reads the engine's messages from seamLead before the tail's first
// record to a little past its last.
func (t *tail) fetch(ctx context.Context, src Source, tty bool) ([2]engineMsgs, error) {
	var msgs [2]engineMsgs
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := src(ctx, t.first.Add(-seamLead))
	if err != nil {
		return msgs, fmt.Errorf("seam: open the engine's log: %w", err)
	}
	defer rc.Close()
	until := t.first
	for _, l := range t.last {
		if l.After(until) {
			until = l
		}
	}
	until = until.Add(seamClock)
	p := &pump{ctx: ctx}
	p.write = func(ts time.Time, s Stream, _ bool, b []byte) error {
		if ts.After(until) {
			return errSeamRead
		}
		m := &msgs[index(s)]
		m.text = append(m.text, b...)
		m.ends = append(m.ends, len(m.text))
		m.ts = append(m.ts, ts)
		return nil
	}
	if err := p.decode(rc, tty); err != nil && !errors.Is(err, errSeamRead) {
		return msgs, fmt.Errorf("seam: read the engine's log: %w", err)
	}
	return msgs, nil
}

// match is the mark after the message where ours ends (Seam).
func (m *engineMsgs) match(ours []byte, last time.Time) Mark {
	best := -1
	for from := 0; ; {
		j := bytes.Index(m.text[from:], ours)
		if j < 0 {
			break
		}
		end := from + j + len(ours)
		from += j + 1
		k := m.messageEnding(end)
		if k < 0 {
			continue
		}
		if best >= 0 && m.ts[k].After(last.Add(seamClock)) {
			break // later ones are later still
		}
		best = k
	}
	if best < 0 {
		// Nothing matched: skip what the engine stamped up to the
		// arrival.
		return Mark{Time: last.Add(time.Nanosecond)}
	}
	seen := 0
	for k := best; k >= 0 && m.ts[k].Equal(m.ts[best]); k-- {
		seen++
	}
	text := m.text[:m.ends[best]]
	return Mark{Time: m.ts[best], Seen: seen, Open: len(text) == 0 || text[len(text)-1] != '\n'}
}

// messageEnding is the message that ends at end of text, or -1.
func (m *engineMsgs) messageEnding(end int) int {
	lo, hi := 0, len(m.ends)
	for lo < hi {
		mid := (lo + hi) / 2
		if m.ends[mid] < end {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(m.ends) && m.ends[lo] == end {
		return lo
	}
	return -1
}

// rotatedSuffix is how kubelet names a rotated container log:
// <path>.<YYYYMMDD-hhmmss>; older ones are gzipped (.gz) and are never the
// newest.
var rotatedSuffix = regexp.MustCompile(`^\.[0-9]{8}-[0-9]{6}$`)

// lastRotated is the newest uncompressed rotated file of the log at path,
// or "".
func lastRotated(path string) string {
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return ""
	}
	base, last := filepath.Base(path), ""
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, base) && rotatedSuffix.MatchString(name[len(base):]) && name > last {
			last = name // the names sort by time
		}
	}
	if last == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(path), last)
}
