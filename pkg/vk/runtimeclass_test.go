package vk

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeRuntimeClasses is a runtimeClassGetter over a map, answering as the
// API server does.
type fakeRuntimeClasses struct {
	mu      sync.Mutex
	classes map[string]string // name → handler
	err     error
}

func (f *fakeRuntimeClasses) get(_ context.Context, name string) (*nodev1.RuntimeClass, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	h, ok := f.classes[name]
	if !ok {
		return nil, apierrors.NewNotFound(nodev1.Resource("runtimeclasses"), name)
	}
	return &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: h}, nil
}

func (f *fakeRuntimeClasses) set(name, handler string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.classes[name] = handler
}

func TestRuntimeHandler(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	ctx := context.Background()
	// No API server: the default handler whatever the class.
	name := "sandboxed"
	pod.Spec.RuntimeClassName = &name
	if h, err := e.p.runtimeHandler(ctx, pod); h != "" || err != nil {
		t.Errorf("without an API server: %q %v", h, err)
	}

	rcs := &fakeRuntimeClasses{classes: map[string]string{"sandboxed": "runsc"}}
	e.p.runtimeClasses = rcs.get
	if h, err := e.p.runtimeHandler(ctx, pod); h != "runsc" || err != nil {
		t.Errorf("sandboxed: %q %v", h, err)
	}
	empty := ""
	for _, n := range []*string{nil, &empty} {
		pod.Spec.RuntimeClassName = n
		if h, err := e.p.runtimeHandler(ctx, pod); h != "" || err != nil {
			t.Errorf("no class: %q %v", h, err)
		}
	}
	missing := "missing"
	pod.Spec.RuntimeClassName = &missing
	if _, err := e.p.runtimeHandler(ctx, pod); !apierrors.IsNotFound(err) || err.Error() != `runtimeclass.node.k8s.io "missing" not found` {
		t.Errorf("missing class: %v", err)
	}
	rcs.err = errors.New("connection refused")
	if _, err := e.p.runtimeHandler(ctx, pod); err == nil || err.Error() != "failed to lookup RuntimeClass missing: connection refused" {
		t.Errorf("API server away: %v", err)
	}
}

// TestWorkerRuntimeClass checks that the sandbox gets the handler of the
// pod's RuntimeClass, and that a pod whose class does not exist waits
// (ContainerCreating, no sandbox) until it does.
func TestWorkerRuntimeClass(t *testing.T) {
	e := newTestEnv(t)
	rcs := &fakeRuntimeClasses{classes: map[string]string{}}
	e.p.runtimeClasses = rcs.get
	pod := testPod()
	pod.Spec.InitContainers = nil
	name := "kata"
	pod.Spec.RuntimeClassName = &name
	w := newPodWorker(e.p, pod)
	w.pass(context.Background())
	if n := len(e.rt.Sandboxes); n != 0 {
		t.Fatalf("%d sandboxes without the RuntimeClass", n)
	}
	st := e.last(t).Status
	cs := containerStatus(st, "a")
	if st.Phase != v1.PodPending || cs.State.Waiting == nil || cs.State.Waiting.Reason != reasonContainerCreating ||
		!strings.Contains(cs.State.Waiting.Message, `Failed to create pod sandbox: runtimeclass.node.k8s.io "kata" not found`) {
		t.Fatalf("phase %s, a: %+v", st.Phase, cs.State)
	}
	if w.next <= 0 || w.next > backoffInitial {
		t.Errorf("retry in %v, want within %v", w.next, backoffInitial)
	}

	rcs.set("kata", "kata-qemu")
	e.clock.Step(backoffInitial)
	w.pass(context.Background())
	e.rt.Lock()
	var handlers []string
	for _, sb := range e.rt.Sandboxes {
		handlers = append(handlers, sb.RuntimeHandler)
	}
	e.rt.Unlock()
	if len(handlers) != 1 || handlers[0] != "kata-qemu" {
		t.Fatalf("sandbox handlers %v, want [kata-qemu]", handlers)
	}
	if cs := containerStatus(e.last(t).Status, "a"); cs.State.Running == nil {
		t.Errorf("a once the class exists: %+v", cs.State)
	}
}
