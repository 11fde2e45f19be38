package dockerapi

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
	"k8s.io/klog/v2"
)

// Event is one container event from the engine. Resync events carry no
// object: they say the stream was (re)connected or a subscriber fell behind,
// so events may have been missed and the subscriber must re-list.
type Event struct {
	Resync     bool
	Action     events.Action
	ID         string
	Attributes map[string]string
	Time       time.Time
}

// Events is the one container event stream the program shares: a single
// engine subscription fanned out to any number of subscribers, reconnected
// with back-off when the engine goes away.
type Events struct {
	c *Client

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	up   bool
	// conns counts the stream's connections (Connection).
	conns uint64
}

type subscriber struct {
	ch     chan Event
	behind bool // dropped an event: owes a Resync
}

// NewEvents returns the shared event stream of c; call Run to start it.
func (c *Client) NewEvents() *Events {
	return &Events{c: c, subs: map[*subscriber]struct{}{}}
}

// Connected reports whether the engine stream is currently open.
func (e *Events) Connected() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.up
}

// Subscribe returns a channel of events that lives until ctx ends. The first
// event is always a Resync, so a subscriber can list once and then follow.
func (e *Events) Subscribe(ctx context.Context) <-chan Event {
	s := &subscriber{ch: make(chan Event, 1024)}
	s.ch <- Event{Resync: true}
	e.mu.Lock()
	e.subs[s] = struct{}{}
	e.mu.Unlock()
	go func() {
		<-ctx.Done()
		e.mu.Lock()
		delete(e.subs, s)
		close(s.ch)
		e.mu.Unlock()
	}()
	return s.ch
}

func (e *Events) publish(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for s := range e.subs {
		if s.behind {
			select {
			case s.ch <- Event{Resync: true}:
				s.behind = false
			default:
				continue
			}
		}
		select {
		case s.ch <- ev:
		default:
			// Never block the shared stream on one slow reader.
			s.behind = true
		}
	}
}

func (e *Events) setUp(up bool) {
	e.mu.Lock()
	e.up = up
	if up {
		e.conns++
	}
	e.mu.Unlock()
}

// Connection numbers the stream's current (or last) connection, from 1; 0
// before the first. Events may have been missed before each: a subscriber
// that noted the number when it last re-listed knows whether it is behind.
func (e *Events) Connection() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.conns
}

// Run follows the engine's container events until ctx ends, reconnecting
// with capped exponential back-off.
func (e *Events) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	var since time.Time
	for ctx.Err() == nil {
		err := e.follow(ctx, &since, func() { backoff = 100 * time.Millisecond })
		e.setUp(false)
		if ctx.Err() != nil {
			return
		}
		klog.V(2).InfoS("Engine event stream ended; reconnecting", "err", err, "backoff", backoff)
		e.c.streamRetry() // metrics.go
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (e *Events) follow(ctx context.Context, since *time.Time, connected func()) error {
	if _, err := e.c.Ping(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := client.EventsListOptions{Filters: client.Filters{}.Add("type", string(events.ContainerEventType))}
	if !since.IsZero() {
		opts.Since = strconv.FormatInt(since.Unix(), 10)
	}
	r := e.c.api.Events(ctx, opts)
	e.setUp(true)
	connected()
	// Events may have been missed while disconnected: everyone re-lists.
	e.publish(Event{Resync: true})
	for {
		select {
		case m, ok := <-r.Messages:
			if !ok {
				return nil
			}
			t := time.Unix(0, m.TimeNano)
			*since = t
			e.c.eventSeen(t) // metrics.go: lag
			e.publish(Event{Action: m.Action, ID: m.Actor.ID, Attributes: m.Actor.Attributes, Time: t})
		case err := <-r.Err:
			return wrap("follow events", e.c.host, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
