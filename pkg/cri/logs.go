package cri

import (
	"context"
	"io"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
	"github.com/cri-compose/cri-compose/pkg/cri/perm"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// logPumps runs one pump per container: it follows the engine's log stream
// and writes CRI-format lines to the container's log path, resuming after
// the last line already written.
type logPumps struct {
	docker *dockerapi.Client
	access perm.Access // who besides root may read the log files

	mu    sync.Mutex
	pumps map[string]*pump
	wg    sync.WaitGroup

	counters crilog.Counters // bytes written and drops of every pump (metrics.go)
}

type pump struct {
	cancel context.CancelFunc
	done   chan struct{}
	w      *crilog.Writer
}

func newLogPumps(d *dockerapi.Client, a perm.Access) *logPumps {
	return &logPumps{docker: d, access: a, pumps: map[string]*pump{}}
}

// ensure starts a pump for the container unless one runs already. The pump
// ends when the container has exited and its stream is drained.
func (l *logPumps) ensure(ctx context.Context, id, path string, tty bool, running func(context.Context) bool) {
	if path == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pumps[id]; ok {
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
	since, err := crilog.LastTimestamp(path)
	if err != nil {
		klog.InfoS("Log file has no readable last line; reading the engine's log from the start", "container", id, "err", err)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &pump{cancel: cancel, done: make(chan struct{}), w: w}
	l.pumps[id] = p
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer close(p.done)
		defer w.Close()
		src := func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
			return l.docker.ContainerLogs(ctx, id, since, true)
		}
		backoff := 100 * time.Millisecond
		for {
			last, err := crilog.Pump(ctx, w, src, tty, since)
			since = last
			if ctx.Err() != nil || dockerapi.IsNotFound(err) {
				return
			}
			if err == nil && !running(ctx) {
				return // the container exited and everything it wrote is in
			}
			if err != nil {
				klog.V(2).InfoS("Log stream broke; resuming", "container", id, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}()
}

// beforeExit runs before the store reports a container exited: its pump
// drains first, so an exited container's output is all in its log file. A
// container that exited before this server pumped it (a quick one whose
// exit event beat StartContainer's pump, or one that exited while the
// server was down) gets its pump here.
func (s *Server) beforeExit(r *containerRec) {
	if r.LogPath != "" && r.StartedAt != 0 && !s.pumps.known(r.ID) {
		s.pumps.ensure(context.Background(), r.ID, r.LogPath, r.Tty, s.runningFn(r.ID))
	}
	s.pumps.drain(r.ID, 2*time.Second)
}

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

// stop ends a container's pump (on removal).
func (l *logPumps) stop(id string) {
	l.mu.Lock()
	p, ok := l.pumps[id]
	delete(l.pumps, id)
	l.mu.Unlock()
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
	l.mu.Unlock()
	l.wg.Wait()
}
