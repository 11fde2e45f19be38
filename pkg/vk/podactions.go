package vk

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Decide, then act, as kubelet's computePodActions and SyncPod:
// computePodActions is a pure function from the pod, what the runtime
// holds of it, its probes' results and its back-offs to the plan of one
// step toward the spec; applyPodActions (podapply.go) carries the plan
// out and turns what happened into the containers' waiting reasons.

// podState is where a pod is in its life on this node. It only moves
// forward (advance): a pod that finished stays finished, and a deleted pod
// stays deleted.
type podState int

const (
	// podActive: driven toward its spec; containers restart per
	// restartPolicy.
	podActive podState = iota
	// podTerminal: the pod reached Succeeded or Failed. Nothing restarts;
	// what still runs (sidecars) stops, then the sandbox.
	podTerminal
	// podDeleting: the pod was deleted; everything of it stops and is
	// removed.
	podDeleting
)

func (s podState) String() string {
	switch s {
	case podActive:
		return "active"
	case podTerminal:
		return "terminal"
	}
	return "deleting"
}

// actionKind is what is done to one container.
type actionKind int

const (
	actionStart        actionKind = iota // create and start a new container
	actionStartCreated                   // start cur, created but not started
	actionRestart                        // start anew cur, which exited; its back-off is over
	actionBackOff                        // leave cur, which exited, for now: CrashLoopBackOff
	actionKill                           // kill cur, running
	actionDone                           // cur, an init container, succeeded
	actionNoTarget                       // an ephemeral container's target has no container yet: wait
	actionResize                         // update the resources of cur, running, to c's (resize.go)
)

// killReason is why a running container is killed.
type killReason int

const (
	killProbe       killReason = iota // it failed its liveness or startup probe
	killSpecChanged                   // its spec changed: it restarts at once
)

// containerAction is one step for one container of the pod.
type containerAction struct {
	kind actionKind
	c    *v1.Container
	init bool          // c is an init container (sidecars included)
	cur  *criContainer // the current container; nil for actionStart
	// attempt is that of the container to make (start, restart).
	attempt uint32
	// target (start of an ephemeral container) is the id of the container
	// whose PID namespace it joins ("" for none).
	target string
	// specChanged (restart): it was killed for a new spec, and restarts
	// free of its back-off. Otherwise its back-off counts from failedAt.
	specChanged bool
	failedAt    time.Time
	// kill: why, with which grace period; probe is the probe that failed.
	kill  killReason
	probe probeKind
	grace int64
	// message is why it is killed (a Killing event and the message of its
	// terminated state; "" for none), or for actionBackOff its waiting
	// message.
	message string
	// wait (actionBackOff) is how long until the back-off ends.
	wait time.Duration
	// recheck: once this action changed something, the pod is looked at
	// again before the actions after it.
	recheck bool
}

// podActions is the plan of one step.
type podActions struct {
	// terminal: the pod has just finished (restartPolicy Never and its
	// sandbox or an init container failed, or its app containers are
	// done). recheck: look at it again at once, to stop what is left.
	terminal bool
	recheck  bool
	// stop is what still runs of a terminal or deleted pod, to stop as at
	// deletion (preStop hooks, the sidecars last).
	stop []*criContainer
	// killPod: the pod is deleted; after stop, its sandboxes go (kill).
	killPod bool
	// stopSandbox is a terminal pod's sandbox, to stop once nothing runs.
	stopSandbox string
	// createSandbox: the sandbox is missing or died; sandboxAttempt is
	// made after killSandboxes (earlier ones still ready) are stopped.
	createSandbox  bool
	sandboxAttempt uint32
	killSandboxes  []string
	// sandboxHeld: making the sandbox waits sandboxWait for its back-off.
	sandboxHeld bool
	sandboxWait time.Duration
	// syncContainers: the sandbox runs, so the pod's volumes are set up
	// (and the pod finishes, when terminal) before containers, in order.
	syncContainers bool
	containers     []containerAction
}

// probeView is what the plan needs of the probes (probeSet).
type probeView interface {
	// failed is the probe (liveness or startup) that container instance id
	// failed, if any: it is to be killed.
	failed(id string) (probeKind, bool)
	// state is whether running container c (instance id) has started and
	// is ready.
	state(c *v1.Container, id string) (started, ready bool)
}

// backoffs is what the plan needs of the back-offs (backoff), read only.
type backoffs interface {
	ready(key string, failedAt time.Time) (bool, time.Duration)
	retryReady(key string) (bool, time.Duration)
	delay(key string) time.Duration
}

// planInput is what computePodActions decides from.
type planInput struct {
	pod   *v1.Pod
	obs   *observation
	state podState
	// specChanged names the containers killed for a new spec, to restart
	// at once whatever restartPolicy says.
	specChanged map[string]bool
	probes      probeView
	backoff     backoffs
}

// Back-off keys, per pod.
func crashKey(pod *v1.Pod, name string) string  { return "crash/" + string(pod.UID) + "/" + name }
func configKey(pod *v1.Pod, name string) string { return "config/" + string(pod.UID) + "/" + name }
func sandboxKey(pod *v1.Pod) string             { return "sandbox/" + string(pod.UID) }

// computePodActions is the next step for the pod: the sandbox first (made
// when missing, made anew when it died, unless restartPolicy Never and its
// containers already ran), then the init containers one after the other
// (each regular one to success, each sidecar until it has started), then
// the app containers all at once. Once the app containers were started,
// only the sidecars are kept running among the init containers.
func computePodActions(in planInput) podActions {
	pod, obs := in.pod, in.obs
	sb := obs.sandboxInfo()
	switch in.state {
	case podDeleting:
		return podActions{killPod: true, stop: obs.notExited()}
	case podTerminal:
		if sb == nil || !sb.ready {
			return podActions{}
		}
		if left := obs.notExited(); len(left) > 0 {
			return podActions{stop: left}
		}
		return podActions{stopSandbox: sb.id}
	}

	if sb == nil || !sb.ready {
		if sb != nil && pod.Spec.RestartPolicy == v1.RestartPolicyNever && len(obs.containers) > 0 {
			return podActions{terminal: true}
		}
		return in.sandboxActions()
	}

	plan := podActions{syncContainers: true}
	initialized := obs.initialized(pod)
	if initialized && appsDone(pod, obs, in.specChanged) {
		// As kubelet: the pod is done, and its sidecars are not restarted
		// to keep it alive.
		plan.terminal, plan.recheck = true, true
		return plan
	}
	// As kubelet: before the init containers, so that one may debug a
	// pod whose init container fails (ephemeral.go).
	plan.containers = in.ephemeralActions()
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isSidecar(c) {
			a, started := in.sidecarAction(c)
			switch {
			case a != nil && !initialized:
				plan.containers = append(plan.containers, *a)
				return plan
			case a != nil:
				a.recheck = true
				plan.containers = append(plan.containers, *a)
			case !started && !initialized:
				return plan // the next waits for it to start
			}
			continue
		}
		if initialized {
			continue
		}
		cur := obs.current(c.Name)
		switch {
		case cur == nil:
			plan.containers = append(plan.containers, containerAction{kind: actionStart, c: c, init: true, attempt: obs.nextAttempt(c.Name)})
		case cur.state == runtimeapi.ContainerState_CONTAINER_CREATED:
			plan.containers = append(plan.containers, containerAction{kind: actionStartCreated, c: c, init: true, cur: cur})
		case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
			// wait for it to exit
		case cur.state == runtimeapi.ContainerState_CONTAINER_EXITED && cur.exitCode == 0:
			plan.containers = append(plan.containers, containerAction{kind: actionDone, c: c, init: true, cur: cur})
			continue
		case !initRestarts(c, &pod.Spec, cur):
			plan.terminal = true // the pod failed
		default:
			plan.containers = append(plan.containers, in.restartAction(c, true, cur))
		}
		return plan
	}

	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cur := obs.current(c.Name)
		switch {
		case cur == nil:
			plan.containers = append(plan.containers, containerAction{kind: actionStart, c: c, attempt: obs.nextAttempt(c.Name)})
		case cur.state == runtimeapi.ContainerState_CONTAINER_CREATED:
			plan.containers = append(plan.containers, containerAction{kind: actionStartCreated, c: c, cur: cur})
		case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if a := in.killAction(c, false, cur); a != nil {
				plan.containers = append(plan.containers, *a)
			}
		case cur.state == runtimeapi.ContainerState_CONTAINER_EXITED:
			if in.specChanged[c.Name] || containerShouldRestart(c, &pod.Spec, cur.exitCode) {
				plan.containers = append(plan.containers, in.restartAction(c, false, cur))
			}
		}
	}
	return plan
}

// sandboxActions makes the next sandbox once its back-off allows, after
// stopping what is left of the earlier ones.
func (in *planInput) sandboxActions() podActions {
	if ok, wait := in.backoff.retryReady(sandboxKey(in.pod)); !ok {
		return podActions{sandboxHeld: true, sandboxWait: wait}
	}
	plan := podActions{createSandbox: true}
	if sbs := in.obs.sandboxes; len(sbs) > 0 {
		plan.sandboxAttempt = sbs[0].GetMetadata().GetAttempt() + 1
		for _, sb := range sbs {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				plan.killSandboxes = append(plan.killSandboxes, sb.Id)
			}
		}
	}
	return plan
}

// sidecarAction is the step for sidecar c, if any; started tells whether
// it has started, so that the next init container may start.
func (in *planInput) sidecarAction(c *v1.Container) (a *containerAction, started bool) {
	cur := in.obs.current(c.Name)
	switch {
	case cur == nil:
		return &containerAction{kind: actionStart, c: c, init: true, attempt: in.obs.nextAttempt(c.Name)}, false
	case cur.state == runtimeapi.ContainerState_CONTAINER_CREATED:
		return &containerAction{kind: actionStartCreated, c: c, init: true, cur: cur}, false
	case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
		if a := in.killAction(c, true, cur); a != nil {
			return a, false
		}
		started, _ = in.probes.state(c, cur.id)
		return nil, started
	default: // exited (or unknown): a sidecar always comes back, with back-off
		a := in.restartAction(c, true, cur)
		return &a, false
	}
}

// killAction is the kill of running container cur of spec c when it
// failed its liveness or startup probe, or when its spec changed.
func (in *planInput) killAction(c *v1.Container, init bool, cur *criContainer) *containerAction {
	pod := in.pod
	if kind, failed := in.probes.failed(cur.id); failed {
		probe := c.LivenessProbe
		if kind == probeStartup {
			probe = c.StartupProbe
		}
		return &containerAction{kind: actionKill, c: c, init: init, cur: cur, kill: killProbe, probe: kind,
			grace: probeGrace(pod, probe), message: probeKillMessage(pod, c, init, kind)}
	}
	if cur.hashNoResources != "" && cur.hashNoResources == containerHashNoResources(c) {
		return in.resizeAction(c, init, cur)
	}
	if cur.hashNoResources == "" && (cur.hash == "" || cur.hash == containerHash(c)) {
		return nil
	}
	a := &containerAction{kind: actionKill, c: c, init: init, cur: cur, kill: killSpecChanged, grace: podGrace(pod)}
	if init && isSidecar(c) {
		a.message = fmt.Sprintf("Init container %s definition changed", c.Name)
	}
	return a
}

// restartAction starts again container c, which exited as cur, once its
// back-off allows (at once when it was killed for a new spec).
func (in *planInput) restartAction(c *v1.Container, init bool, cur *criContainer) containerAction {
	a := containerAction{kind: actionRestart, c: c, init: init, cur: cur, attempt: in.obs.nextAttempt(c.Name)}
	if in.specChanged[c.Name] {
		a.specChanged = true
		return a
	}
	a.failedAt = cur.finishedAt
	if a.failedAt.IsZero() {
		a.failedAt = cur.createdAt
	}
	key := crashKey(in.pod, c.Name)
	if ok, wait := in.backoff.ready(key, a.failedAt); !ok {
		pod := in.pod
		return containerAction{kind: actionBackOff, c: c, init: init, cur: cur, wait: wait,
			message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
				in.backoff.delay(key), c.Name, pod.Name, pod.Namespace, pod.UID)}
	}
	return a
}
