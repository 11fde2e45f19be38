package cri

import (
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/store"
)

// GetContainerEvents streams container lifecycle events (kubelet's evented
// PLEG) until the client goes away. Events come from the store's
// OnContainer and OnSandbox, so they follow every change the store sees,
// whether a handler or the engine's event stream caused it, in order per
// container. Sandboxes send
// events too, with the sandbox id as container id, as containerd does.
//
// A subscriber that falls more than eventBuffer events behind is cut off
// with ResourceExhausted (it must re-list and subscribe again) rather than
// slowing the store or silently missing events.
func (s *Server) GetContainerEvents(_ *runtime.GetEventsRequest, stream runtime.RuntimeService_GetContainerEventsServer) error {
	sub := s.cevents.subscribe()
	defer s.cevents.unsubscribe(sub)
	ctx := stream.Context()
	for {
		// A subscriber cut off ends now, even with events still queued.
		select {
		case <-sub.done:
			return sub.err
		default:
		}
		select {
		case ev := <-sub.ch:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-sub.done:
			return sub.err
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// eventBuffer is how many events a subscriber may lag behind.
const eventBuffer = 4096

// goneSandboxes is how many deleted sandboxes' last status are kept, for
// events of their containers that arrive after the sandbox was removed.
const goneSandboxes = 256

// containerEvents fans container events out to the subscribers of
// GetContainerEvents. publish never blocks.
type containerEvents struct {
	store  *store.Store
	buffer int

	n  atomic.Int32 // subscribers: no events are built without any
	mu sync.Mutex
	// subs and closed are guarded by mu.
	subs   map[*eventSub]struct{}
	closed bool

	goneMu   sync.Mutex
	gone     map[string]*runtime.PodSandboxStatus
	goneRing []string
}

type eventSub struct {
	ch   chan *runtime.ContainerEventResponse
	done chan struct{} // closed, with err set, when the hub ends the stream
	err  error
}

func newContainerEvents(st *store.Store) *containerEvents {
	return &containerEvents{store: st, buffer: eventBuffer, subs: map[*eventSub]struct{}{},
		gone: map[string]*runtime.PodSandboxStatus{}}
}

func (h *containerEvents) subscribe() *eventSub {
	sub := &eventSub{ch: make(chan *runtime.ContainerEventResponse, h.buffer), done: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		sub.err = status.Error(codes.Unavailable, "container events: the runtime is shutting down")
		close(sub.done)
		return sub
	}
	h.subs[sub] = struct{}{}
	h.n.Add(1)
	return sub
}

func (h *containerEvents) unsubscribe(sub *eventSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[sub]; ok {
		delete(h.subs, sub)
		h.n.Add(-1)
	}
}

// end cuts one subscriber off with err; h.mu is held.
func (h *containerEvents) end(sub *eventSub, err error) {
	delete(h.subs, sub)
	h.n.Add(-1)
	sub.err = err
	close(sub.done)
}

// close ends every subscription (the server is stopping).
func (h *containerEvents) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for sub := range h.subs {
		h.end(sub, status.Error(codes.Unavailable, "container events: the runtime is shutting down"))
	}
}

// publish hands events to every subscriber, in order, without blocking.
func (h *containerEvents) publish(evs ...*runtime.ContainerEventResponse) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		for _, ev := range evs {
			select {
			case sub.ch <- ev:
				continue
			default:
			}
			klog.InfoS("Container events subscriber fell behind; ending its stream", "buffer", cap(sub.ch))
			h.end(sub, status.Errorf(codes.ResourceExhausted,
				"container events: subscriber fell %d events behind; list again and resubscribe", cap(sub.ch)))
			break
		}
	}
}

// eventKinds maps a record's move from old to cur (nil: did not exist / was
// deleted) to the events kubelet expects. A record first seen past CREATED
// (its earlier changes were missed) gets the events it skipped, in order.
func eventKinds(oldState, curState runtime.ContainerState, hadOld, hasCur, started bool) []runtime.ContainerEventType {
	if !hasCur {
		return []runtime.ContainerEventType{runtime.ContainerEventType_CONTAINER_DELETED_EVENT}
	}
	rank := func(st runtime.ContainerState) int {
		switch st {
		case runtime.ContainerState_CONTAINER_CREATED:
			return 1
		case runtime.ContainerState_CONTAINER_RUNNING:
			return 2
		case runtime.ContainerState_CONTAINER_EXITED:
			return 3
		}
		return 0 // unknown: says nothing
	}
	from, to := 0, rank(curState)
	if hadOld {
		from = rank(oldState)
	}
	if to == 0 {
		return nil
	}
	if to <= from { // went back (e.g. restarted outside CRI): say where it is
		from = to - 1
	}
	var out []runtime.ContainerEventType
	for r := from + 1; r <= to; r++ {
		switch r {
		case 1:
			out = append(out, runtime.ContainerEventType_CONTAINER_CREATED_EVENT)
		case 2:
			if started { // a container whose start failed never started
				out = append(out, runtime.ContainerEventType_CONTAINER_STARTED_EVENT)
			}
		case 3:
			out = append(out, runtime.ContainerEventType_CONTAINER_STOPPED_EVENT)
		}
	}
	return out
}

// onContainer is the store's OnContainer: it runs under the store's
// per-container lock, so the events of one container are published in
// order.
func (h *containerEvents) onContainer(old, cur *containerRec) {
	if h.n.Load() == 0 {
		return
	}
	var kinds []runtime.ContainerEventType
	var rec *containerRec
	switch {
	case cur == nil:
		kinds, rec = eventKinds(0, 0, true, false, false), old
	case old == nil:
		kinds, rec = eventKinds(0, cur.State, false, true, cur.StartedAt != 0), cur
	default:
		kinds, rec = eventKinds(old.State, cur.State, true, true, cur.StartedAt != 0), cur
	}
	if len(kinds) == 0 {
		return
	}
	h.publish(h.build(rec.ID, rec.SandboxID, nil, kinds)...)
}

// onSandbox is the store's OnSandbox: the infra container's events, with
// the sandbox id as container id. READY maps to running, NOTREADY after
// READY to exited.
func (h *containerEvents) onSandbox(old, cur *sandboxRec) {
	if cur == nil && old != nil {
		h.remember(old) // even with no subscriber: a container event may follow
	}
	if h.n.Load() == 0 {
		return
	}
	state := func(r *sandboxRec, created bool) runtime.ContainerState {
		switch {
		case r.State == runtime.PodSandboxState_SANDBOX_READY:
			return runtime.ContainerState_CONTAINER_RUNNING
		case created:
			return runtime.ContainerState_CONTAINER_CREATED
		}
		return runtime.ContainerState_CONTAINER_EXITED
	}
	var kinds []runtime.ContainerEventType
	var rec *sandboxRec
	switch {
	case cur == nil:
		kinds, rec = eventKinds(0, 0, true, false, false), old
	case old == nil:
		kinds, rec = eventKinds(0, state(cur, true), false, true, true), cur
	default:
		kinds, rec = eventKinds(state(old, false), state(cur, false), true, true, true), cur
	}
	if len(kinds) == 0 {
		return
	}
	var st *runtime.PodSandboxStatus
	if cur == nil {
		st = sandboxStatus(*old)
	}
	h.publish(h.build(rec.ID, rec.ID, st, kinds)...)
}

// build makes the events, each carrying the pod's status and the statuses
// of its containers as the store holds them now (shared, read-only).
func (h *containerEvents) build(id, sandboxID string, sbStatus *runtime.PodSandboxStatus, kinds []runtime.ContainerEventType) []*runtime.ContainerEventResponse {
	if sbStatus == nil {
		if sb, err := h.store.Sandbox(sandboxID); err == nil && sb.ID == sandboxID {
			sbStatus = sandboxStatus(sb)
		} else {
			sbStatus = h.gonePod(sandboxID)
		}
	}
	var statuses []*runtime.ContainerStatus
	for _, c := range h.store.ContainersOf(sandboxID) {
		statuses = append(statuses, containerStatus(c))
	}
	now := time.Now().UnixNano()
	out := make([]*runtime.ContainerEventResponse, len(kinds))
	for i, k := range kinds {
		out[i] = &runtime.ContainerEventResponse{ContainerId: id, ContainerEventType: k, CreatedAt: now,
			PodSandboxStatus: sbStatus, ContainersStatuses: statuses}
	}
	return out
}

// remember keeps a deleted sandbox's last status for a while.
func (h *containerEvents) remember(sb *sandboxRec) {
	h.goneMu.Lock()
	defer h.goneMu.Unlock()
	if _, ok := h.gone[sb.ID]; !ok {
		h.goneRing = append(h.goneRing, sb.ID)
		if len(h.goneRing) > goneSandboxes {
			delete(h.gone, h.goneRing[0])
			h.goneRing = h.goneRing[1:]
		}
	}
	h.gone[sb.ID] = sandboxStatus(*sb)
}

func (h *containerEvents) gonePod(id string) *runtime.PodSandboxStatus {
	h.goneMu.Lock()
	defer h.goneMu.Unlock()
	return h.gone[id]
}
