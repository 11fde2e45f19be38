package cri_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/test/suite"
)

// evCollector is one GetContainerEvents subscriber that keeps every event.
type evCollector struct {
	mu   sync.Mutex
	evs  []*runtime.ContainerEventResponse
	err  error
	done chan struct{}
}

// subscribeEvents opens a GetContainerEvents stream on the current server
// and collects it until the test ends.
func (e *criEnv) subscribeEvents() *evCollector {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	stream, err := e.rt().GetContainerEvents(ctx, &runtime.GetEventsRequest{})
	if err != nil {
		e.t.Fatalf("GetContainerEvents: %v", err)
	}
	c := &evCollector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			ev, err := stream.Recv()
			c.mu.Lock()
			if err != nil {
				c.err = err
				c.mu.Unlock()
				return
			}
			c.evs = append(c.evs, ev)
			c.mu.Unlock()
		}
	}()
	return c
}

// of returns the events of one container id, in the order received.
func (c *evCollector) of(id string) []*runtime.ContainerEventResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*runtime.ContainerEventResponse
	for _, ev := range c.evs {
		if ev.GetContainerId() == id {
			out = append(out, ev)
		}
	}
	return out
}

func evKinds(evs []*runtime.ContainerEventResponse) []runtime.ContainerEventType {
	var out []runtime.ContainerEventType
	for _, ev := range evs {
		out = append(out, ev.GetContainerEventType())
	}
	return out
}

// evPod is what one pod of the lifecycle test made.
type evPod struct {
	cfg                  *runtime.PodSandboxConfig
	sandbox, long, short string
	killedBehindOurBack  bool
}

// evPodLifecycle runs one pod through its whole life as kubelet would: a
// long-running container stopped by CRI (or killed through the engine
// directly), a short one that exits by itself, then stop and remove.
// It runs on its own goroutine, so it returns errors instead of failing.
func evPodLifecycle(e *criEnv, p *evPod) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := e.rt()
	rp, err := rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: p.cfg})
	if err != nil {
		return fmt.Errorf("RunPodSandbox: %w", err)
	}
	p.sandbox = rp.GetPodSandboxId()
	run := func(cfg *runtime.ContainerConfig) (string, error) {
		cr, err := rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: p.sandbox, Config: cfg, SandboxConfig: p.cfg})
		if err != nil {
			return "", fmt.Errorf("CreateContainer %s: %w", cfg.GetMetadata().GetName(), err)
		}
		if _, err := rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: cr.GetContainerId()}); err != nil {
			return "", fmt.Errorf("StartContainer %s: %w", cfg.GetMetadata().GetName(), err)
		}
		return cr.GetContainerId(), nil
	}
	if p.long, err = run(ctrConfig("long", "sleep 300")); err != nil {
		return err
	}
	if p.short, err = run(ctrConfig("short", "exit 0")); err != nil {
		return err
	}
	waitState := func(id string, want runtime.ContainerState) error {
		for ctx.Err() == nil {
			st, err := rt.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: id})
			if err == nil && st.GetStatus().GetState() == want {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("container %.12s never became %s", id, want)
	}
	if err := waitState(p.short, runtime.ContainerState_CONTAINER_EXITED); err != nil {
		return err
	}
	if p.killedBehindOurBack {
		if err := e.d.ContainerKill(ctx, p.long, ""); err != nil {
			return fmt.Errorf("engine kill: %w", err)
		}
		if err := waitState(p.long, runtime.ContainerState_CONTAINER_EXITED); err != nil {
			return err
		}
	} else if _, err := rt.StopContainer(ctx, &runtime.StopContainerRequest{ContainerId: p.long, Timeout: 0}); err != nil {
		return fmt.Errorf("StopContainer: %w", err)
	}
	if _, err := rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		return fmt.Errorf("StopPodSandbox: %w", err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: p.sandbox}); err != nil {
		return fmt.Errorf("RemovePodSandbox: %w", err)
	}
	return nil
}

// TestContainerEventsLifecycle: two subscribers following GetContainerEvents
// while several pods start, stop and are removed concurrently each receive,
// for every container and every sandbox (its id as container id), CREATED,
// STARTED, STOPPED and DELETED, once each and in that order, with the pod's
// status attached.
func TestContainerEventsLifecycle(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	subs := []*evCollector{e.subscribeEvents(), e.subscribeEvents()}
	suite.Eventually(t, "two event subscribers", 10*time.Second, func() (bool, string) {
		n := cri.EventSubscribers(e.server().Srv)
		return n == 2, fmt.Sprint(n)
	})

	pods := make([]*evPod, 4)
	for i := range pods {
		pods[i] = &evPod{cfg: e.podConfig(fmt.Sprintf("events%d", i)), killedBehindOurBack: i == 0}
		e.cleanupPod(pods[i].cfg)
	}
	start := time.Now()
	errs := make(chan error, len(pods))
	var wg sync.WaitGroup
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := evPodLifecycle(e, p); err != nil {
				errs <- fmt.Errorf("pod %s: %w", p.cfg.GetMetadata().GetName(), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d pods ran their whole life concurrently in %v", len(pods), time.Since(start))

	want := []runtime.ContainerEventType{
		runtime.ContainerEventType_CONTAINER_CREATED_EVENT,
		runtime.ContainerEventType_CONTAINER_STARTED_EVENT,
		runtime.ContainerEventType_CONTAINER_STOPPED_EVENT,
		runtime.ContainerEventType_CONTAINER_DELETED_EVENT,
	}
	for si, sub := range subs {
		for _, p := range pods {
			for _, id := range []string{p.sandbox, p.long, p.short} {
				suite.Eventually(t, fmt.Sprintf("subscriber %d: DELETED of %.12s", si, id), 30*time.Second, func() (bool, string) {
					evs := sub.of(id)
					return len(evs) > 0 && evs[len(evs)-1].GetContainerEventType() == runtime.ContainerEventType_CONTAINER_DELETED_EVENT,
						fmt.Sprint(evKinds(evs))
				})
			}
		}
		time.Sleep(200 * time.Millisecond) // anything late and wrong would show now
		for _, p := range pods {
			for _, id := range []string{p.sandbox, p.long, p.short} {
				evs := sub.of(id)
				if got := evKinds(evs); !slices.Equal(got, want) {
					t.Errorf("subscriber %d, %.12s (pod %s): events %v, want %v", si, id, p.cfg.GetMetadata().GetName(), got, want)
					continue
				}
				checkEvents(t, p, id, evs, start)
			}
		}
	}
	for i, sub := range subs {
		sub.mu.Lock()
		if sub.err != nil {
			t.Errorf("subscriber %d stream ended: %v", i, sub.err)
		}
		sub.mu.Unlock()
	}
}

// checkEvents checks what each event carries: its time, the pod's status
// and the statuses of the pod's containers, no older than the event.
func checkEvents(t *testing.T, p *evPod, id string, evs []*runtime.ContainerEventResponse, start time.Time) {
	t.Helper()
	var last int64
	for _, ev := range evs {
		kind := ev.GetContainerEventType()
		at := ev.GetCreatedAt()
		if at < start.UnixNano() || at > time.Now().UnixNano() || at < last {
			t.Errorf("%.12s %s: created_at %v is not in order within the test", id, kind, time.Unix(0, at))
		}
		last = at
		ps := ev.GetPodSandboxStatus()
		if ps.GetId() != p.sandbox || ps.GetMetadata().GetUid() != p.cfg.GetMetadata().GetUid() {
			t.Errorf("%.12s %s: pod status %s/%s, want %s/%s", id, kind, ps.GetId(), ps.GetMetadata().GetUid(),
				p.sandbox, p.cfg.GetMetadata().GetUid())
		}
		var own *runtime.ContainerStatus
		for _, cs := range ev.GetContainersStatuses() {
			if cs.GetId() == id {
				own = cs
			}
			if cs.GetId() == p.sandbox {
				t.Errorf("%.12s %s: the infra container is listed among the containers", id, kind)
			}
		}
		if id == p.sandbox {
			wantState := map[runtime.ContainerEventType]runtime.PodSandboxState{
				runtime.ContainerEventType_CONTAINER_STARTED_EVENT: runtime.PodSandboxState_SANDBOX_READY,
				runtime.ContainerEventType_CONTAINER_STOPPED_EVENT: runtime.PodSandboxState_SANDBOX_NOTREADY,
				runtime.ContainerEventType_CONTAINER_DELETED_EVENT: runtime.PodSandboxState_SANDBOX_NOTREADY,
			}
			if w, ok := wantState[kind]; ok && ps.GetState() != w {
				t.Errorf("sandbox %.12s %s: pod state %s, want %s", id, kind, ps.GetState(), w)
			}
			continue
		}
		switch kind {
		case runtime.ContainerEventType_CONTAINER_DELETED_EVENT:
			if own != nil {
				t.Errorf("%.12s DELETED still lists the container", id)
			}
		case runtime.ContainerEventType_CONTAINER_STARTED_EVENT:
			if own == nil || own.GetState() == runtime.ContainerState_CONTAINER_CREATED {
				t.Errorf("%.12s STARTED carries status %v", id, own.GetState())
			}
		case runtime.ContainerEventType_CONTAINER_STOPPED_EVENT:
			if own == nil || own.GetState() != runtime.ContainerState_CONTAINER_EXITED {
				t.Errorf("%.12s STOPPED carries status %v", id, own.GetState())
			}
		default:
			if own == nil {
				t.Errorf("%.12s %s does not list the container", id, kind)
			}
		}
	}
}

// TestCloseStreamsEndsEvents: CloseStreams (what cri-compose does before
// its graceful stop) ends a GetContainerEvents stream at once with
// Unavailable, so the stop need not wait for the client to go.
func TestCloseStreamsEndsEvents(t *testing.T) {
	e := newCRIEnv(t)
	c := e.subscribeEvents()
	e.server().Srv.CloseStreams()
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream still runs 5 s after CloseStreams")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if status.Code(c.err) != codes.Unavailable {
		t.Errorf("stream ended with %v, want Unavailable", c.err)
	}
}
