package cri

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
	"github.com/cri-compose/cri-compose/pkg/cri/perm"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/moby/moby/api/pkg/stdcopy"
)

// logPumps runs one pump per container, which writes CRI-format lines to
// the container's log path. A container this server starts has its log
// written from its attach stream, attached before the start
// (streamBeforeStart). One that runs on without such a stream (after a
// restart of this server, or of the engine) has it written from the
// engine's log, resuming where the log file ends (crilog.Seam); beside
// such a pump the container's attach stream is read through a
// crilog.Gate, which holds the container back while its pump is behind,
// so the engine's capped log never rotates away output the pump has not
// read.
type logPumps struct {
	docker Engine
	access perm.Access // who besides root may read the log files
	// local: the engine runs on this host, so a container's process may
	// be watched for its exit (openAtExit).
	local bool

	mu      sync.Mutex
	pumps   map[string]*pump
	holders map[string]*holder
	wg      sync.WaitGroup

	counters crilog.Counters // bytes written and drops of every pump (metrics.go)
}

type pump struct {
	cancel context.CancelFunc
	done   chan struct{}
	w      *crilog.Writer
	// complete: the container exited and its attach stream brought all
	// it wrote (l.mu): no pump on the engine's log is needed after it.
	complete bool
}

// holder reads a container's attach stream through its gate.
type holder struct {
	gate    *crilog.Gate
	ctx     context.Context // ends with the holder
	cancel  context.CancelFunc
	done    chan struct{}
	watched bool // its container's process is watched (l.mu)
}

// attachWindow is how far the attach stream may run ahead of the pump, in
// what the output costs in the engine's log (crilog.Cost). Beyond it the
// engine still queues about 1 MB of output per stream for the attach
// stream before the container blocks, and for short lines that is several
// MB of log; the engine keeps at least 16 MiB past any message
// (pkg/sandbox/spec.go).
const attachWindow = 1 << 20

// seamPatience is how long a seam waits for the engine to answer.
const seamPatience = time.Minute

// gateStall is how long a gate holds a container while its pump makes no
// progress at all before it lets the output through (crilog.NewGate).
const gateStall = 10 * time.Second

func newLogPumps(d Engine, a perm.Access) *logPumps {
	return &logPumps{docker: d, access: a, local: d.IsLocal(), pumps: map[string]*pump{}, holders: map[string]*holder{}}
}

// streamBeforeStart attaches to a created container and writes its CRI
// log at path from the attach stream, from its first output on, as
// containerd's shim writes it from the container's pipe. A container's
// output then never waits on the engine's log: the engine still writes
// it (the source after a restart of this server), but nothing reads it
// back while the stream lasts. A failure to attach or to open the log is
// logged, and the pump that ensure starts after the start reads the
// engine's log instead.
func (l *logPumps) streamBeforeStart(ctx context.Context, id, path string, tty bool, running func(context.Context) bool) {
	st, err := l.docker.ContainerAttach(ctx, id, dockerapi.AttachConfig{Stdout: true, Stderr: true})
	if err != nil {
		klog.InfoS("Cannot attach to the container before its start; its log is read from the engine's log", "container", id, "err", err)
		return
	}
	w, err := crilog.OpenWriterFor(path, l.access)
	if err != nil {
		st.Close()
		klog.ErrorS(err, "Cannot open container log", "container", id, "path", path)
		return
	}
	w.CountInto(&l.counters) // metrics.go
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pumps[id]; ok {
		p.cancel()
	}
	pctx, cancel := context.WithCancel(context.Background())
	p := &pump{cancel: cancel, done: make(chan struct{}), w: w}
	l.pumps[id] = p
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(p.done)
		defer w.Close()
		l.stream(pctx, p, id, path, tty, st, running)
	}()
}

// stream writes the container's log from its attach stream until the
// container exits. If the stream breaks first (an engine restart, a lost
// connection to a remote engine), the engine's log takes over where the
// stream's records end (crilog.Seam), held by a gate as after a restart of
// this server.
func (l *logPumps) stream(ctx context.Context, p *pump, id, path string, tty bool, st *dockerapi.Stream, running func(context.Context) bool) {
	w := p.w
	stop := context.AfterFunc(ctx, func() { st.Close() })
	err := crilog.CopyAttach(st.Reader, tty, w)
	stop()
	st.Close()
	if ctx.Err() != nil {
		return
	}
	if err == nil && l.exited(ctx, id) {
		// All it wrote came through the stream.
		l.mu.Lock()
		p.complete = true
		l.mu.Unlock()
		return
	}
	klog.InfoS("The attach stream ended while the container runs; its log goes on from the engine's log", "container", id, "err", err)
	pos := l.seam(ctx, id, path, tty)
	pid := 0
	if in, err := l.docker.ContainerInspect(ctx, id); err == nil && in.State != nil {
		pid = in.State.Pid
	}
	l.mu.Lock()
	l.hold(id, tty)
	h := l.holders[id]
	l.openAtExit(h, id, pid)
	l.mu.Unlock()
	l.run(ctx, id, w, tty, pos, h, running)
}

// exited reports whether the engine says the container is not running (or
// gone). An engine that does not answer (one restarting, which ends every
// attach stream) says nothing.
func (l *logPumps) exited(ctx context.Context, id string) bool {
	in, err := l.docker.ContainerInspect(ctx, id)
	if err != nil {
		return dockerapi.IsNotFound(err)
	}
	return in.State == nil || !in.State.Running
}

// seam is where the container's log at path ends in the engine's log
// (crilog.Seam), asked again for up to seamPatience while the engine does
// not answer (a stream that broke at an engine restart). Should it not
// answer, or the container be gone, the records' times stand for the
// engine's stamps.
func (l *logPumps) seam(ctx context.Context, id, path string, tty bool) crilog.Position {
	backoff, giveUp := 100*time.Millisecond, time.Now().Add(seamPatience)
	for {
		pos, err := crilog.Seam(ctx, path, func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
			return l.docker.ContainerLogs(ctx, id, since, false)
		}, tty)
		if err == nil {
			return pos
		}
		if dockerapi.IsNotFound(err) || ctx.Err() != nil || time.Now().After(giveUp) {
			klog.InfoS("Cannot find where the container's log ends in the engine's log; resuming by time", "container", id, "err", err)
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	pos, err := crilog.LastPosition(path)
	if err != nil {
		klog.InfoS("Log file has no readable last line; reading the engine's log from the start", "container", id, "err", err)
	}
	return pos
}

// hold keeps a holder on a running container that has none (after a
// restart of this server, or a container started by someone else). l.mu is
// held.
func (l *logPumps) hold(id string, tty bool) {
	if h, ok := l.holders[id]; ok {
		select {
		case <-h.done:
		default:
			return
		}
	}
	l.holders[id] = l.startHolder(id, tty)
}

// startHolder runs a holder. l.mu is held.
func (l *logPumps) startHolder(id string, tty bool) *holder {
	ctx, cancel := context.WithCancel(context.Background())
	h := &holder{gate: crilog.NewGate(attachWindow, gateStall), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(h.done)
		defer cancel() // and the exit watch with it (openAtExit)
		h.run(ctx, l.docker, id, tty)
	}()
	return h
}

// openAtExit opens the gate of a holder for good once the container's
// process (pid) has exited (crilog.Gate.Open), when the engine is local.
// Elsewhere, or where the process cannot be watched, the gate keeps
// holding while the pump is behind, and an exit while it holds can lose the
// output the engine then has not logged. l.mu is held.
func (l *logPumps) openAtExit(h *holder, id string, pid int) {
	if !l.local || pid <= 0 || h.watched {
		return
	}
	h.watched = true
	err := watchExit(h.ctx, pid, id, h.gate.Open)
	switch {
	case errors.Is(err, syscall.ESRCH):
		// Gone already: a container that exited right after its start.
		klog.V(2).InfoS("The container's process exited before it could be watched", "container", id, "pid", pid)
	case err != nil:
		klog.InfoS("Cannot watch the container's process; its output is held to the log pump's pace until the engine tells of its exit", "container", id, "pid", pid, "err", err)
	}
}

// run reads the attach stream through the gate until the container has
// exited, attaching again after the stream breaks (an engine restart).
func (h *holder) run(ctx context.Context, d Engine, id string, tty bool) {
	stalls := 0
	backoff := 100 * time.Millisecond
	for {
		st, err := d.ContainerAttach(ctx, id, dockerapi.AttachConfig{Stdout: true, Stderr: true})
		if err == nil {
			// Output the engine stamped a little before the attach counts
			// too: a count too high only loosens the hold, one too low
			// would stall it (and the engine's clock may differ a little
			// from this host's).
			h.gate.Attach(time.Now().Add(-time.Second))
		}
		if err == nil {
			err = h.drain(ctx, st, tty)
			st.Close()
			h.gate.Detach()
		}
		if n := h.gate.Stalls(); n > stalls {
			stalls = n
			klog.InfoS("Log pump made no progress while the container's output waited; letting it through", "container", id, "stall", gateStall, "times", n)
		}
		if ctx.Err() != nil || dockerapi.IsNotFound(err) {
			return
		}
		// The stream ends when the container exits; an error from the
		// inspect (the engine away) means try again.
		in, ierr := d.ContainerInspect(ctx, id)
		if ierr == nil && (in.State == nil || !in.State.Running) {
			return
		}
		if dockerapi.IsNotFound(ierr) {
			return
		}
		klog.V(2).InfoS("Attach stream broke; attaching again", "container", id, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// drain reads the attach stream through the gate and throws the output
// away: the pump writes it, from the engine's log.
func (h *holder) drain(ctx context.Context, st *dockerapi.Stream, tty bool) error {
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()
	buf := make([]byte, 16*1024)
	read := func(s crilog.Stream, n int) error {
		if err := h.gate.Wait(ctx); err != nil {
			return err
		}
		n, err := io.ReadFull(st.Reader, buf[:n])
		h.gate.Add(s, buf[:n])
		return err
	}
	if tty {
		for {
			if err := h.gate.Wait(ctx); err != nil {
				return err
			}
			n, err := st.Reader.Read(buf)
			h.gate.Add(crilog.Stdout, buf[:n])
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(st.Reader, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		s := crilog.Stdout
		if stdcopy.StdType(hdr[0]) == stdcopy.Stderr {
			s = crilog.Stderr
		}
		for size := int(binary.BigEndian.Uint32(hdr[4:])); size > 0; {
			n := min(size, len(buf))
			if err := read(s, n); err != nil {
				return err
			}
			size -= n
		}
	}
}

// ensure starts a pump for the container unless one runs already, or its
// attach stream brought all it wrote. The pump ends when the container has
// exited and its stream is drained.
//
// pid is the container's main process (0: unknown), whose exit opens the
// gate (openAtExit).
func (l *logPumps) ensure(ctx context.Context, id, path string, tty bool, pid int, running func(context.Context) bool) {
	if path == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pumps[id]; ok {
		if p.complete {
			return
		}
		select {
		case <-p.done:
		default:
			return
		}
	}
	w, err := crilog.OpenWriterFor(path, l.access)
	if err != nil {
		klog.ErrorS(err, "Cannot open container log", "container", id, "path", path)
		return
	}
	w.CountInto(&l.counters) // metrics.go
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &pump{cancel: cancel, done: make(chan struct{}), w: w}
	l.pumps[id] = p
	l.hold(id, tty)
	h := l.holders[id]
	l.openAtExit(h, id, pid)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(p.done)
		defer w.Close()
		l.run(ctx, id, w, tty, l.seam(ctx, id, path, tty), h, running)
	}()
}

// The pump's waits: between fetches while the attach stream has seen output
// the engine's log does not show yet (the engine writes the two apart),
// and, while no attach stream is read, for new output at all. pumpPace is
// the least time between two fetches while the gate does not hold the
// container: every fetch reads again the last seconds of output
// (crilog.Resume, crilog.Tailed), so a fetch for every line of a container
// that writes a steady hundred lines a second cost more than the lines.
const (
	pumpPace     = 50 * time.Millisecond
	pumpRetryMin = 5 * time.Millisecond
	pumpRetryMax = 500 * time.Millisecond
	pumpRetries  = 20 // fetches that find nothing the attach count expects, before it is reset
	pumpIdle     = time.Second
)

// run pumps a container's log until it has exited and all it wrote is in.
//
// It fetches what the engine logged since the last record (a read to the
// end, not a follow: Docker 20.10's follow of a json-file log can lose the
// entry at a rotation; and by the log's tail where it can, crilog.Tailed),
// whenever the attach stream shows new output, and again until everything
// the attach stream saw is in. So the last output of a container that
// exited at once is in too, whenever the engine writes it.
func (l *logPumps) run(ctx context.Context, id string, w *crilog.Writer, tty bool, pos crilog.Position, h *holder, running func(context.Context) bool) {
	gate := h.gate
	src := crilog.CountByTime(func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
		return l.docker.ContainerLogs(ctx, id, since, false)
	}, &l.counters)
	if !tty {
		// A TTY's stream has no frames to count the answer's messages by.
		src = crilog.Tailed(func(ctx context.Context, since time.Time, tail int) (io.ReadCloser, error) {
			return l.docker.ContainerLogTail(ctx, id, since, tail)
		}, src, gate.Expected, func() crilog.Position { return pos }, &l.counters)
	}
	backoff := 100 * time.Millisecond
	retry, retries := pumpRetryMin, 0
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	var fetched time.Time
	for {
		if d := pumpPace - time.Since(fetched); d > 0 && !gate.Holding() && !wait(d) {
			return
		}
		fetched = time.Now()
		// Take the token first: output that comes during the fetch leaves
		// one for the next wait.
		select {
		case <-gate.More():
		default:
		}
		before := pos
		out, errs := gate.Behind()
		last, err := crilog.Pump(ctx, w, src, tty, pos, crilog.Resume(pos, out, errs, gate.Holding()), gate)
		pos = last
		if ctx.Err() != nil || dockerapi.IsNotFound(err) {
			return
		}
		if err != nil {
			klog.V(2).InfoS("Log stream broke; resuming", "container", id, "err", err)
			if !wait(backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if pos != before {
			retry, retries = pumpRetryMin, 0
			continue // more may be there already
		}
		select {
		case <-h.done:
			// The attach stream ended: the container exited, or the
			// holder gave up. Once the engine says it is not running,
			// its log holds all it wrote: one more fetch, then done,
			// whatever the attach stream counted.
			if !running(ctx) {
				last, err := crilog.Pump(ctx, w, src, tty, pos, crilog.Resume(pos, true, true, true), gate)
				pos = last
				if err == nil || ctx.Err() != nil {
					return
				}
			}
			if !wait(pumpIdle) {
				return
			}
			continue
		default:
		}
		if out, errs := gate.Behind(); out || errs {
			if retries++; retries > pumpRetries {
				// What the attach stream counted never came: the
				// engine's log lost it (rotated away before the pump
				// read it), or the counts disagree (output stamped
				// before an attach counted after it).
				if out, errs := gate.Missing(); out+errs > 0 {
					klog.InfoS("The attach stream saw output that the engine's log does not hold; counting from here", "container", id, "stdoutCost", out, "stderrCost", errs)
				}
				gate.Resync()
				retries = 0
				continue
			}
			if !wait(retry) {
				return
			}
			retry = min(retry*2, pumpRetryMax)
			continue
		}
		var idle <-chan time.Time
		if !gate.Live() {
			idle = time.After(pumpIdle)
		}
		select {
		case <-ctx.Done():
			return
		case <-gate.More():
		case <-h.done:
		case <-idle:
		}
	}
}

// beforeExit runs before the store reports a container exited: its pump
// drains first, so an exited container's output is all in its log file. A
// container that exited before this server pumped it (a quick one whose
// exit event beat StartContainer's pump, or one that exited while the
// server was down) gets its pump here.
func (s *Server) beforeExit(r containerRec) {
	if r.LogPath != "" && r.StartedAt != 0 && !s.pumps.known(r.ID) {
		s.pumps.ensure(context.Background(), r.ID, r.LogPath, r.Tty, 0, s.runningFn(r.ID))
	}
	s.pumps.drain(r.ID, drainWait)
}

// drainWait bounds how long an exit waits for its pump (beforeExit): the
// wait holds up the engine's other events, and a resync's, so a pump far
// behind finishes after the exit is reported.
const drainWait = 2 * time.Second

// known reports whether a pump was started for the container.
func (l *logPumps) known(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.pumps[id]
	return ok
}

// drain waits (bounded) for a container's pump to finish, so an exit is
// reported only once the container's last lines are in its log file.
func (l *logPumps) drain(id string, timeout time.Duration) {
	l.mu.Lock()
	p, ok := l.pumps[id]
	l.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		klog.V(2).InfoS("Log pump still busy after the container exited", "container", id)
	}
}

// stop ends a container's pump and holder (on removal, or a failed start).
func (l *logPumps) stop(id string) {
	l.mu.Lock()
	p, ok := l.pumps[id]
	h, held := l.holders[id]
	delete(l.pumps, id)
	delete(l.holders, id)
	l.mu.Unlock()
	if held {
		h.cancel()
		<-h.done
	}
	if ok {
		p.cancel()
		<-p.done
	}
}

// reopen makes a container's pump write to a new file at the same path
// (kubelet renamed the old one away).
func (l *logPumps) reopen(id string) (bool, error) {
	l.mu.Lock()
	p, ok := l.pumps[id]
	l.mu.Unlock()
	if !ok {
		return false, nil
	}
	select {
	case <-p.done:
		return false, nil
	default:
	}
	return true, p.w.Reopen()
}

// close stops every pump (on shutdown); they resume on the next start.
func (l *logPumps) close() {
	l.mu.Lock()
	for _, p := range l.pumps {
		p.cancel()
	}
	for _, h := range l.holders {
		h.cancel()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
