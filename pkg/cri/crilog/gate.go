package crilog

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// Gate holds a container back while its pump is behind, so that the engine
// never rotates away output the pump has not read yet.
//
// The pump reads the engine's log, which the engine keeps only up to a cap.
// Beside it, the container's attach stream is read through the gate, and
// the engine writes a container's output to its log and to every attached
// reader in the same step: when an attached reader stops reading, the
// engine's buffer for it fills (1 MB), then the engine stops reading the
// container's pipe, and the container's next write blocks. That is the
// backpressure containerd's shim gives by writing the CRI log from the pipe
// itself. The gate lets attached bytes through only while fewer than window
// of them are still to come through the pump, so the engine's log holds at
// most about window plus the engine's own buffer of output not yet pumped.
//
// Both sides count the container's output by what it costs in the engine's
// log (Cost): the attach stream carries it as written, the pump as log
// messages (a message's content, with its '\n').
type Gate struct {
	window int64
	stall  time.Duration

	mu       sync.Mutex
	attached [2]int64 // bytes of stdout, stderr let through since the last Attach
	pumped   [2]int64 // and pumped since then, counted from after
	// The same in messages of the engine's log (messages), for Expected.
	attachedMsgs, pumpedMsgs [2]int64
	lineLen                  [2]int64      // bytes of the line each stream has not finished (messages)
	from                     time.Time     // records stamped before this were output before the attach
	wake                     chan struct{} // closed when pumped moves, if anyone waits
	waiting                  int
	stalls                   int           // times the gate gave up waiting (Stalls)
	more                     chan struct{} // a token when attached bytes came (More)
	live                     bool          // an attach stream is being read (Live)
	heldAt                   time.Time     // when Wait last held the attach stream
	open                     bool          // the container's process exited: no more holding (Open)
}

// NewGate returns a gate that lets the attach stream run at most window
// bytes ahead of the pump. If the pump makes no progress for stall while
// output waits, the gate lets the output through: a pump that cannot
// advance (an engine that dropped the output from its log, say) must not
// hold the container forever.
func NewGate(window int64, stall time.Duration) *Gate {
	return &Gate{window: window, stall: stall, wake: make(chan struct{}), more: make(chan struct{}, 1)}
}

// Attach starts a new count for an attach stream established now. Output
// the pump reads that the engine stamped before from was written before the
// attach and does not count against it. (Pass the zero time for an attach
// made before the container started: all its output counts.)
func (g *Gate) Attach(from time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.attached, g.pumped, g.from, g.live = [2]int64{}, [2]int64{}, from, true
	g.attachedMsgs, g.pumpedMsgs, g.lineLen = [2]int64{}, [2]int64{}, [2]int64{}
	g.signal()
}

// Detach says the attach stream ended.
func (g *Gate) Detach() {
	g.mu.Lock()
	g.live = false
	g.mu.Unlock()
	g.poke()
}

// Live reports whether an attach stream is being read: only then does
// More tell of all new output.
func (g *Gate) Live() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.live
}

// More receives a token after output came through the attach stream (or
// the stream ended): the pump has something to fetch.
func (g *Gate) More() <-chan struct{} { return g.more }

func (g *Gate) poke() {
	select {
	case g.more <- struct{}{}:
	default:
	}
}

// Behind reports, per stream, whether the attach stream has seen output
// the pump has not written yet.
func (g *Gate) Behind() (stdout, stderr bool) {
	out, errs := g.Missing()
	return out > 0, errs > 0
}

// Missing is how many bytes of each stream the attach stream has seen and
// the pump has not written.
func (g *Gate) Missing() (stdout, stderr int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.attached[0]-g.pumped[0], 0), max(g.attached[1]-g.pumped[1], 0)
}

// tailSlack is what Expected adds for output the attach stream has not
// counted yet.
const tailSlack = 32

// Expected is a guess at how many messages of the engine's log the pump
// has yet to write, for a tailed fetch (Tailed): the messages the attach
// stream saw beyond the pump (messages), and room for what came since.
// While the gate holds the container (Holding) there is no guess (0): the
// engine has then queued output for the attach stream that it has not
// counted, and a tailed fetch would have to reach back further than it
// holds (maxTailAnswer).
func (g *Gate) Expected() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holding() {
		return 0
	}
	n := int64(tailSlack)
	for i := range g.attachedMsgs {
		n += max(g.attachedMsgs[i]-g.pumpedMsgs[i], 0)
	}
	return int(n)
}

// Resync makes the count start again from what the pump wrote, when the
// two sides disagree (output the engine logged before an attach counted
// after it, say).
func (g *Gate) Resync() {
	g.mu.Lock()
	g.attached, g.attachedMsgs = g.pumped, g.pumpedMsgs
	g.mu.Unlock()
}

// entryOverhead is what the engine's json-file log adds to each line: the
// JSON around it, its stream and its timestamp
// ({"log":"…\n","stream":"stdout","time":"2026-12-06T23:34:54.123456789Z"}).
// A flood of short lines costs the engine's log several times its own size
// (13-byte lines take 83 bytes each), and it is the log's size that its cap
// bounds, so the gate's window is counted in it.
const entryOverhead = 70

// Cost is what output p costs in the engine's log: its bytes and the
// overhead of every line it ends. (The escaping of characters JSON must
// escape is not counted.) Both sides of the gate count this way, so a line
// costs the same whether the attach stream delivered it in one piece or
// several.
func Cost(p []byte) int {
	return len(p) + entryOverhead*bytes.Count(p, []byte{'\n'})
}

func index(s Stream) int {
	if s == Stderr {
		return 1
	}
	return 0
}

// ahead is how many bytes the attach stream is ahead of the pump; g.mu is
// held.
func (g *Gate) ahead() int64 {
	return g.attached[0] + g.attached[1] - g.pumped[0] - g.pumped[1]
}

// Pumped records one message of stream costing n (Cost), stamped ts, as
// written by the pump.
func (g *Gate) Pumped(s Stream, ts time.Time, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ts.Before(g.from) {
		return
	}
	g.pumped[index(s)] += int64(n)
	g.pumpedMsgs[index(s)]++
	if g.waiting > 0 {
		g.signal()
	}
}

// signal wakes the waiters; g.mu is held.
func (g *Gate) signal() {
	close(g.wake)
	g.wake = make(chan struct{})
}

// Wait returns once the attach stream may read on: at once while the pump
// is less than window bytes behind, else when it has caught up that far or
// has made no progress for the stall time. It returns ctx's error if ctx
// ends first. Count what is then read with Add.
func (g *Gate) Wait(ctx context.Context) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		g.mu.Lock()
		if g.open || g.ahead() < g.window {
			g.mu.Unlock()
			return nil
		}
		wake, pumped := g.wake, g.pumped
		g.waiting++
		g.heldAt = time.Now()
		g.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(g.stall)
		} else {
			timer.Reset(g.stall)
		}
		var err error
		stalled := false
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-wake:
		case <-timer.C:
			stalled = true
		}
		g.mu.Lock()
		g.waiting--
		g.heldAt = time.Now()
		if stalled && g.pumped == pumped {
			// No progress for the whole stall: count again from here
			// rather than hold the container.
			g.attached, g.attachedMsgs, g.stalls = g.pumped, g.pumpedMsgs, g.stalls+1
		}
		g.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// engineSplit is the size at which the engine cuts a line into messages
// of its log: 16 KiB (moby's logger copier).
const engineSplit = 16 * 1024

// messages counts the messages of the engine's log that output p makes,
// given that the line it continues has lineLen bytes already, and returns
// the length of the line it leaves unfinished. The engine's copier logs a
// line when it reads its '\n', and a piece of one whenever 16 KiB of it
// are buffered without one (the rest, an empty one included, follows in
// the next message): a line of n bytes is n/16Ki + 1 messages.
func messages(p []byte, lineLen int64) (n int, rest int64) {
	for len(p) > 0 {
		seg, after, nl := bytes.Cut(p, []byte{'\n'})
		end := lineLen + int64(len(seg))
		n += int(end/engineSplit - lineLen/engineSplit)
		if !nl {
			return n, end
		}
		n++
		lineLen, p = 0, after
	}
	return n, lineLen
}

// Add counts output p of stream read from the attach stream: its Cost,
// and its messages in the engine's log.
func (g *Gate) Add(s Stream, p []byte) {
	if len(p) == 0 {
		return
	}
	g.mu.Lock()
	i := index(s)
	g.attached[i] += int64(Cost(p))
	n, rest := messages(p, g.lineLen[i])
	g.attachedMsgs[i] += int64(n)
	g.lineLen[i] = rest
	g.mu.Unlock()
	g.poke()
}

// holdMemory is how long after the gate last held the attach stream it
// still counts as holding: bytes the engine queued for the attach stream
// while it was held are read, and counted, only after.
const holdMemory = 2 * time.Second

// Holding reports whether the attach stream is held, or was lately: the
// attach count may then lag what the engine has logged.
func (g *Gate) Holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holding()
}

// holding is Holding; g.mu is held.
func (g *Gate) holding() bool {
	return g.ahead() >= g.window || time.Since(g.heldAt) < holdMemory
}

// Open lets all output through from now on, for good: the container's
// process has exited. The engine then gives the process's output 2 s to
// reach its log and its attach streams before it drops the rest (moby's
// handleContainerExit), so a hold after the exit would lose the output it
// holds instead of saving it; and nothing more will come, so the engine's
// log cannot rotate away what the pump has still to read.
func (g *Gate) Open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		g.open = true
		g.signal()
	}
}

// Stalls is how many times the gate let output through because the pump
// made no progress for the stall time.
func (g *Gate) Stalls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stalls
}
