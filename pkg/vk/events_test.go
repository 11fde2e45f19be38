package vk

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	"k8s.io/utils/clock"
)

// noEvents is a runtime without GetContainerEvents.
type noEvents struct{ *critesting.FakeRuntimeService }

func (noEvents) GetContainerEvents(context.Context, chan *runtimeapi.ContainerEventResponse, func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	return status.Error(codes.Unimplemented, "no events here")
}

// streamEvents is a runtime whose event stream sends what is put on ch.
type streamEvents struct {
	*critesting.FakeRuntimeService
	ch chan *runtimeapi.ContainerEventResponse
}

func (s streamEvents) GetContainerEvents(ctx context.Context, out chan *runtimeapi.ContainerEventResponse, opened func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	opened(nil)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-s.ch:
			out <- ev
		}
	}
}

func woken(w *podWorker, d time.Duration) bool {
	select {
	case <-w.wake:
		return true
	case <-time.After(d):
		return false
	}
}

func TestRelistWhenNoEvents(t *testing.T) {
	fake := critesting.NewFakeRuntimeService()
	p, err := New(context.Background(), Config{NodeName: "n1", StateDir: t.TempDir(), RelistPeriod: 10 * time.Millisecond,
		Runtime: &Runtime{RuntimeService: noEvents{fake}, Images: critesting.NewFakeImageService()}, Clock: clock.RealClock{}})
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod()
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	w := p.workers[pod.UID]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.watchEvents(ctx)
	woken(w, 100*time.Millisecond) // the first relist sees nothing new
	fake.SetFakeContainers([]*critesting.FakeContainer{{ContainerStatus: runtimeapi.ContainerStatus{
		Id: "c1", Metadata: &runtimeapi.ContainerMetadata{Name: "a"}, State: runtimeapi.ContainerState_CONTAINER_RUNNING,
		Labels: map[string]string{labelNode: "n1", labelPodUID: string(pod.UID)}}}})
	if !woken(w, 2*time.Second) {
		t.Fatal("a new container did not wake its pod's worker")
	}
	fake.Lock()
	fake.Containers["c1"].State = runtimeapi.ContainerState_CONTAINER_EXITED
	fake.Unlock()
	if !woken(w, 2*time.Second) {
		t.Fatal("an exit did not wake its pod's worker")
	}
}

func TestEventsWakeTheirPod(t *testing.T) {
	fake := critesting.NewFakeRuntimeService()
	ch := make(chan *runtimeapi.ContainerEventResponse)
	p, err := New(context.Background(), Config{NodeName: "n1", StateDir: t.TempDir(),
		Runtime: &Runtime{RuntimeService: streamEvents{fake, ch}, Images: critesting.NewFakeImageService()}})
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod()
	other := testPod()
	other.Name, other.UID = "other", "uid-2"
	_ = p.CreatePod(context.Background(), pod)
	_ = p.CreatePod(context.Background(), other)
	w, wo := p.workers[pod.UID], p.workers[other.UID]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.watchEvents(ctx)
	if !woken(w, time.Second) || !woken(wo, time.Second) {
		t.Fatal("opening the stream did not wake every worker")
	}
	ch <- &runtimeapi.ContainerEventResponse{ContainerId: "x", ContainerEventType: runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
		PodSandboxStatus: &runtimeapi.PodSandboxStatus{Metadata: &runtimeapi.PodSandboxMetadata{Uid: string(pod.UID)}}}
	if !woken(w, time.Second) {
		t.Fatal("the event did not wake its pod's worker")
	}
	if woken(wo, 50*time.Millisecond) {
		t.Error("the event woke another pod's worker")
	}
}
