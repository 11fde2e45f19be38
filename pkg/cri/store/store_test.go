package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type change struct {
	id       string
	old, cur runtime.ContainerState
	hadOld   bool
	hasCur   bool
}

func recorder(got *[]change) func(old, cur *Container) {
	return func(old, cur *Container) {
		c := change{hadOld: old != nil, hasCur: cur != nil}
		if old != nil {
			c.id, c.old = old.ID, old.State
		}
		if cur != nil {
			c.id, c.cur = cur.ID, cur.State
		}
		*got = append(*got, c)
	}
}

// TestUpdate: a status changes through update only, the metadata stays
// the one added, and listeners hear of state changes alone.
func TestUpdate(t *testing.T) {
	var got []change
	s := New(nil, Options{OnContainer: recorder(&got)})
	md := &ContainerMetadata{ID: "c1", SandboxID: "sb", CreatedAt: 1}
	must(t, s.AddContainer(md, ContainerStatus{State: runtime.ContainerState_CONTAINER_CREATED}))
	if err := s.updateContainer("c1", func(st ContainerStatus) ContainerStatus {
		st.State, st.Pid = runtime.ContainerState_CONTAINER_RUNNING, 5
		return st
	}); err != nil {
		t.Fatal(err)
	}
	// No state change: no event.
	if err := s.updateContainer("c1", func(st ContainerStatus) ContainerStatus { st.Pid = 6; return st }); err != nil {
		t.Fatal(err)
	}
	c, err := s.Container("c1")
	if err != nil {
		t.Fatal(err)
	}
	if c.ContainerMetadata != md || c.Pid != 6 || c.State != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after updates: %+v %+v", c.ContainerMetadata, c.ContainerStatus)
	}
	if err := s.updateContainer("nope", func(st ContainerStatus) ContainerStatus { return st }); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of a missing container: %v", err)
	}
	s.delete("c1")
	want := []change{
		{id: "c1", cur: runtime.ContainerState_CONTAINER_CREATED, hasCur: true},
		{id: "c1", old: runtime.ContainerState_CONTAINER_CREATED, cur: runtime.ContainerState_CONTAINER_RUNNING, hadOld: true, hasCur: true},
		{id: "c1", old: runtime.ContainerState_CONTAINER_RUNNING, hadOld: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n got %+v\nwant %+v", got, want)
	}
	if _, err := s.Container("c1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted container: %v", err)
	}
}

// TestAddRefusesHeldID: metadata is fixed once added, so a second add of
// the same id is refused, changes nothing and tells no listener.
func TestAddRefusesHeldID(t *testing.T) {
	var got []change
	s := New(nil, Options{OnContainer: recorder(&got)})
	first := &ContainerMetadata{ID: "c1", Service: "first"}
	must(t, s.AddContainer(first, ContainerStatus{State: runtime.ContainerState_CONTAINER_RUNNING}))
	err := s.AddContainer(&ContainerMetadata{ID: "c1", Service: "second"}, ContainerStatus{State: runtime.ContainerState_CONTAINER_EXITED})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	c, err := s.Container("c1")
	if err != nil {
		t.Fatal(err)
	}
	if c.ContainerMetadata != first || c.State != runtime.ContainerState_CONTAINER_RUNNING {
		t.Errorf("after a refused add: %+v %+v", c.ContainerMetadata, c.ContainerStatus)
	}
	if len(got) != 1 {
		t.Errorf("changes %+v, want the first add alone", got)
	}
	must(t, s.AddSandbox(&SandboxMetadata{ID: "sb1"}, SandboxStatus{}))
	if err := s.AddSandbox(&SandboxMetadata{ID: "sb1"}, SandboxStatus{}); !errors.Is(err, ErrExists) {
		t.Errorf("second sandbox add: %v, want ErrExists", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestSandboxUpdateAndDelete(t *testing.T) {
	var n int
	s := New(nil, Options{OnSandbox: func(old, cur *Sandbox) { n++ }})
	must(t, s.AddSandbox(&SandboxMetadata{ID: "sb1"}, SandboxStatus{State: runtime.PodSandboxState_SANDBOX_READY}))
	if err := s.updateSandbox("sb1", func(st SandboxStatus) SandboxStatus {
		st.State = runtime.PodSandboxState_SANDBOX_NOTREADY
		return st
	}); err != nil {
		t.Fatal(err)
	}
	s.delete("sb1")
	if n != 3 {
		t.Errorf("%d sandbox changes, want 3 (added, not ready, deleted)", n)
	}
	if nsb, nctr := s.Len(); nsb != 0 || nctr != 0 {
		t.Errorf("left: %d sandboxes, %d containers", nsb, nctr)
	}
}

func TestLookupByPrefix(t *testing.T) {
	s := New(nil, Options{})
	for _, id := range []string{"abc123", "abd456", "ffff"} {
		must(t, s.AddContainer(&ContainerMetadata{ID: id}, ContainerStatus{}))
	}
	for id, want := range map[string]string{"abc123": "abc123", "abc": "abc123", "abd": "abd456", "f": "ffff"} {
		if c, err := s.Container(id); err != nil || c.ID != want {
			t.Errorf("Container(%q) = %v, %v; want %s", id, c.ContainerMetadata, err, want)
		}
	}
	for _, id := range []string{"ab", "x", ""} {
		if _, err := s.Container(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Container(%q): %v, want not found", id, err)
		}
	}
}

func TestListNewestFirst(t *testing.T) {
	s := New(nil, Options{})
	add := func(id, sb string, created int64) {
		must(t, s.AddContainer(&ContainerMetadata{ID: id, SandboxID: sb, CreatedAt: created}, ContainerStatus{}))
	}
	add("a", "p1", 10)
	add("b", "p2", 30)
	add("c", "p1", 20)
	add("d", "p1", 20) // same time: by id
	ids := func(cs []Container) (out []string) {
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	if got := ids(s.Containers(nil)); !slices.Equal(got, []string{"b", "c", "d", "a"}) {
		t.Errorf("all: %v", got)
	}
	if got := ids(s.ContainersOf("p1")); !slices.Equal(got, []string{"c", "d", "a"}) {
		t.Errorf("of p1: %v", got)
	}
	if got := s.ContainersOf("none"); got != nil {
		t.Errorf("of a pod with none: %v", got)
	}
	running := func(c Container) bool { return c.State == runtime.ContainerState_CONTAINER_RUNNING }
	if err := s.updateContainer("a", func(st ContainerStatus) ContainerStatus {
		st.State = runtime.ContainerState_CONTAINER_RUNNING
		return st
	}); err != nil {
		t.Fatal(err)
	}
	if got := ids(s.Containers(running)); !slices.Equal(got, []string{"a"}) {
		t.Errorf("running: %v", got)
	}
}

func TestNoteOOMOnlyOfKnownContainers(t *testing.T) {
	s := New(nil, Options{})
	must(t, s.AddContainer(&ContainerMetadata{ID: "c1"}, ContainerStatus{}))
	s.NoteOOM("c1")
	s.NoteOOM("c1")
	s.NoteOOM("other") // another instance's
	if s.OOMEvents("c1") != 2 || s.OOMEvents("other") != 0 {
		t.Errorf("oom events: c1 %d, other %d", s.OOMEvents("c1"), s.OOMEvents("other"))
	}
	s.delete("c1")
	if s.OOMEvents("c1") != 0 {
		t.Error("a deleted container's oom events stayed")
	}
}

func TestWaitSynced(t *testing.T) {
	s := New(nil, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.WaitSynced(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("before MarkSynced: %v", err)
	}
	done := make(chan error)
	go func() { done <- s.WaitSynced(context.Background()) }()
	s.MarkSynced()
	if err := <-done; err != nil || !s.Synced() {
		t.Errorf("after MarkSynced: %v, synced %v", err, s.Synced())
	}
}

func TestOwns(t *testing.T) {
	s := New(nil, Options{ProjectsDir: "/var/lib/cri-compose/projects"})
	for wd, want := range map[string]bool{
		"/var/lib/cri-compose/projects/p1":    true,
		"/var/lib/cri-compose/projects/./p1":  true,
		"/var/lib/other/projects/p1":          false,
		"":                                    false,
		"/var/lib/cri-compose/projects/p1/x/": false,
	} {
		if got := s.Owns(map[string]string{"com.docker.compose.project.working_dir": wd}); got != want {
			t.Errorf("Owns(%q) = %v", wd, got)
		}
	}
	if !New(nil, Options{}).Owns(nil) {
		t.Error("a store with no projects dir owns every pod")
	}
}
