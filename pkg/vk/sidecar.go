package vk

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Sidecar containers (KEP-753): init containers with restartPolicy
// Always. As kubelet's computeInitContainerActions: each starts in its
// turn among the init containers, and the next one starts once it has
// started (its startup probe succeeded, or it runs when it has none); it
// keeps running beside the app containers, restarted whenever it exits or
// fails its liveness or startup probe, whatever the pod's restartPolicy.
// At termination it is stopped after the app containers and the sidecars
// that follow it (termOrder).

// isSidecar reports whether init container c is a sidecar. An app
// container's restartPolicy is only its restart policy
// (containerShouldRestart), so callers that may hold one ask with init.
func isSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// hasSidecars reports whether the pod has a sidecar.
func hasSidecars(pod *v1.Pod) bool {
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			return true
		}
	}
	return false
}

// initialized reports whether the app containers were started in the
// current sandbox: from then on regular init containers are done with,
// and a sidecar that restarts holds nothing back.
func (o *observation) initialized(pod *v1.Pod) bool {
	for i := range pod.Spec.Containers {
		if o.current(pod.Spec.Containers[i].Name) != nil {
			return true
		}
	}
	return false
}

// appsDone reports whether every app container has run and none is to run
// again (restartPolicy Never, or OnFailure and they succeeded, and none
// was killed for a new spec): kubelet then kills the pod, its sidecars
// included, rather than keep it alive for them.
func appsDone(pod *v1.Pod, obs *observation, specChanged map[string]bool) bool {
	if len(pod.Spec.Containers) == 0 {
		return false
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cur := obs.current(c.Name)
		if cur == nil || cur.state != runtimeapi.ContainerState_CONTAINER_EXITED ||
			specChanged[c.Name] || containerShouldRestart(c, &pod.Spec, cur.exitCode) {
			return false
		}
	}
	return true
}

// termOrder holds a sidecar's SIGTERM back, at pod termination, until the
// app containers and the sidecars after it in the spec have stopped
// (kubelet's terminationOrdering); its preStop hook still runs at once.
type termOrder struct {
	clock   clock.Clock
	gone    map[string]chan struct{} // container id → closed once stopped
	prereqs map[string][]string      // sidecar id → the ids it waits for
}

// newTermOrder orders the stop of the given containers of pod (those not
// yet exited); it is nil when the pod has no sidecar, as nothing waits.
func newTermOrder(clk clock.Clock, pod *v1.Pod, stopping []*criContainer) *termOrder {
	if !hasSidecars(pod) {
		return nil
	}
	o := &termOrder{clock: clk, gone: map[string]chan struct{}{}, prereqs: map[string][]string{}}
	byName := map[string][]string{}
	for _, c := range stopping {
		o.gone[c.id] = make(chan struct{})
		byName[c.name] = append(byName[c.name], c.id)
	}
	var apps []string
	for _, c := range pod.Spec.Containers {
		apps = append(apps, byName[c.Name]...)
	}
	wait := apps
	for i := len(pod.Spec.InitContainers) - 1; i >= 0; i-- {
		ic := &pod.Spec.InitContainers[i]
		if !isSidecar(ic) {
			continue
		}
		for _, id := range byName[ic.Name] {
			o.prereqs[id] = wait
		}
		// The sidecars before this one wait for it as well.
		wait = append(append([]string{}, wait...), byName[ic.Name]...)
	}
	return o
}

// waitTurn waits, at most limit, until what container id waits for has
// stopped; it returns how long it waited.
func (o *termOrder) waitTurn(ctx context.Context, id string, limit time.Duration) time.Duration {
	if o == nil || len(o.prereqs[id]) == 0 {
		return 0
	}
	start := o.clock.Now()
	t := o.clock.NewTimer(limit)
	defer t.Stop()
	for _, p := range o.prereqs[id] {
		select {
		case <-o.gone[p]:
		case <-t.C():
			return o.clock.Since(start)
		case <-ctx.Done():
			return o.clock.Since(start)
		}
	}
	return o.clock.Since(start)
}

// stopped records that container id has stopped (or failed to: what
// waits for it then waits no longer).
func (o *termOrder) stopped(id string) {
	if o == nil {
		return
	}
	if ch, ok := o.gone[id]; ok {
		close(ch)
	}
}

// stopContainers stops the given containers of pod at once, each with its
// preStop hook, within grace seconds, the sidecars last (termOrder).
func (w *podWorker) stopContainers(ctx context.Context, pod *v1.Pod, stopping []*criContainer, grace int64) error {
	order := newTermOrder(w.p.clock, pod, stopping)
	var wg sync.WaitGroup
	errs := make(chan error, len(stopping))
	for _, c := range stopping {
		wg.Go(func() {
			defer order.stopped(c.id)
			var spec *v1.Container
			if c.state == runtimeapi.ContainerState_CONTAINER_RUNNING {
				spec = specOf(pod, c.name) // for its preStop hook
			}
			if err := w.killContainer(ctx, pod, spec, c.id, grace, "", order); err != nil {
				errs <- fmt.Errorf("stop container %s: %w", c.name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// notExited is the pod's containers that are not exited, newest of each
// name first.
func (o *observation) notExited() []*criContainer {
	var out []*criContainer
	for _, l := range o.containers {
		for _, c := range l {
			if c.state != runtimeapi.ContainerState_CONTAINER_EXITED {
				out = append(out, c)
			}
		}
	}
	return out
}
