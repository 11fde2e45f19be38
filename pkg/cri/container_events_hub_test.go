package cri

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/store"
)

func TestContainerEventKinds(t *testing.T) {
	const (
		created = runtime.ContainerState_CONTAINER_CREATED
		running = runtime.ContainerState_CONTAINER_RUNNING
		exited  = runtime.ContainerState_CONTAINER_EXITED
		unknown = runtime.ContainerState_CONTAINER_UNKNOWN
		C       = runtime.ContainerEventType_CONTAINER_CREATED_EVENT
		S       = runtime.ContainerEventType_CONTAINER_STARTED_EVENT
		P       = runtime.ContainerEventType_CONTAINER_STOPPED_EVENT
		D       = runtime.ContainerEventType_CONTAINER_DELETED_EVENT
	)
	for _, tc := range []struct {
		name     string
		old, cur runtime.ContainerState
		hadOld   bool
		hasCur   bool
		started  bool
		want     []runtime.ContainerEventType
	}{
		{"new created", 0, created, false, true, false, []runtime.ContainerEventType{C}},
		{"new running (missed create)", 0, running, false, true, true, []runtime.ContainerEventType{C, S}},
		{"new exited (missed all)", 0, exited, false, true, true, []runtime.ContainerEventType{C, S, P}},
		{"new exited, never started", 0, exited, false, true, false, []runtime.ContainerEventType{C, P}},
		{"started", created, running, true, true, true, []runtime.ContainerEventType{S}},
		{"stopped", running, exited, true, true, true, []runtime.ContainerEventType{P}},
		{"ran between two looks", created, exited, true, true, true, []runtime.ContainerEventType{S, P}},
		{"start failed", created, exited, true, true, false, []runtime.ContainerEventType{P}},
		{"restarted behind our back", exited, running, true, true, true, []runtime.ContainerEventType{S}},
		{"deleted", exited, 0, true, false, true, []runtime.ContainerEventType{D}},
		{"unknown says nothing", created, unknown, true, true, false, nil},
	} {
		got := eventKinds(tc.old, tc.cur, tc.hadOld, tc.hasCur, tc.started)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestContainerEventsSlowSubscriber: a subscriber that does not read is cut
// off with ResourceExhausted once its buffer is full, publish never blocks,
// and the other subscribers get every event in order.
func TestContainerEventsSlowSubscriber(t *testing.T) {
	h := newContainerEvents(store.New(nil, store.Options{Network: "net"}))
	h.buffer = 8
	slow := h.subscribe()
	fast := h.subscribe()
	got := make(chan []string)
	go func() {
		var ids []string
		for len(ids) < 100 {
			select {
			case ev := <-fast.ch:
				ids = append(ids, ev.GetContainerId())
			case <-fast.done:
				t.Errorf("the reading subscriber was cut off: %v", fast.err)
				got <- ids
				return
			}
		}
		got <- ids
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			h.publish(&runtime.ContainerEventResponse{ContainerId: string(rune('A'+i%26)) + string(rune('0'+i/26))})
			time.Sleep(100 * time.Microsecond) // let the reader keep up
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publish blocked on a subscriber that does not read")
	}
	ids := <-got
	if len(ids) != 100 || ids[0] != "A0" || ids[99] != "V3" {
		t.Errorf("the reading subscriber got %d events (%v…)", len(ids), ids[:min(3, len(ids))])
	}
	select {
	case <-slow.done:
	default:
		t.Fatal("the subscriber that does not read was not cut off")
	}
	if status.Code(slow.err) != codes.ResourceExhausted {
		t.Errorf("cut off with %v, want ResourceExhausted", slow.err)
	}
	if n := h.n.Load(); n != 1 {
		t.Errorf("%d subscribers left, want 1", n)
	}
	h.unsubscribe(fast)
	h.close()
	late := h.subscribe()
	if status.Code(late.err) != codes.Unavailable {
		t.Errorf("subscribing after close: %v, want Unavailable", late.err)
	}
}
