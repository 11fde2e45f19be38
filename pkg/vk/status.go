package vk

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Reasons kubelet reports.
const (
	reasonContainerCreating      = "ContainerCreating"
	reasonPodInitializing        = "PodInitializing"
	reasonCrashLoopBackOff       = "CrashLoopBackOff"
	reasonCreateConfigError      = "CreateContainerConfigError"
	reasonCreateContainerError   = "CreateContainerError"
	reasonRunContainerError      = "RunContainerError"
	reasonContainerStatusUnknown = "ContainerStatusUnknown"
	reasonCompleted              = "Completed"
	reasonError                  = "Error"
)

// criContainer is one CRI container of a pod with what its status said.
type criContainer struct {
	id, name, sandboxID string
	attempt             uint32
	state               runtimeapi.ContainerState
	createdAt           time.Time
	startedAt           time.Time
	finishedAt          time.Time
	exitCode            int32
	reason, message     string
	imageRef            string
	logPath             string
	hash                string
	// hashNoResources is the hash of its spec without the resources
	// (resize.go): "" for a container made before vk-cri resized in place.
	hashNoResources string
	// resources is what it runs with, as the runtime reports it (nil: not
	// reported).
	resources *runtimeapi.LinuxContainerResources
	// memoryRequest is the memory request it runs with, which the runtime
	// cannot report (resize.go); nil when unknown (made by an older vk-cri).
	memoryRequest *int64
}

// waiting is why a container is not running when CRI alone cannot tell
// (the worker decided not to start it yet, or failed to).
type waiting struct {
	reason, message string
}

// sandboxInfo is the pod's current sandbox.
type sandboxInfo struct {
	id    string
	ready bool
	ips   []string
}

// statusInput is everything the pod's status is computed from.
type statusInput struct {
	pod         *v1.Pod
	runtimeName string
	hostIPs     []string
	sandbox     *sandboxInfo
	// containers are the pod's CRI containers by name, newest first.
	containers map[string][]*criContainer
	waiting    map[string]*waiting
	// terminated: the pod was deleted and everything of it stopped; the
	// status is final.
	terminated bool
	startTime  time.Time
	now        time.Time
	// probe tells whether running container c (an app container or a
	// sidecar; instance id) has started and is ready, from its probes
	// (nil: both once running).
	probe func(c *v1.Container, id string) (started, ready bool)
	// allocated is what the node granted the pod's containers (nil: their
	// spec); resizePending the PodResizePending condition (nil: none);
	// resizeFailed why the last in-place update failed (resize.go).
	allocated     allocation
	resizePending *v1.PodCondition
	resizeFailed  string
}

// computeStatus is the pod's status from CRI, as kubelet's
// generateAPIPodStatus makes it. It keeps the transition times and the
// conditions that others own from pod.Status.
func computeStatus(in statusInput) v1.PodStatus {
	old := in.pod.Status
	st := v1.PodStatus{QOSClass: old.QOSClass, NominatedNodeName: old.NominatedNodeName}
	st.StartTime = old.StartTime
	if st.StartTime == nil && !in.startTime.IsZero() {
		t := metav1.NewTime(in.startTime)
		st.StartTime = &t
	}
	for _, ip := range in.hostIPs {
		st.HostIPs = append(st.HostIPs, v1.HostIP{IP: ip})
	}
	if len(in.hostIPs) > 0 {
		st.HostIP = in.hostIPs[0]
	}
	ips := []string(nil)
	if in.pod.Spec.HostNetwork {
		ips = in.hostIPs
	} else if in.sandbox != nil {
		ips = in.sandbox.ips
	}
	if len(ips) == 0 && (in.terminated || in.sandbox == nil || !in.sandbox.ready) {
		for _, ip := range old.PodIPs { // a stopped pod keeps the address it had
			ips = append(ips, ip.IP)
		}
	}
	for _, ip := range ips {
		st.PodIPs = append(st.PodIPs, v1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		st.PodIP = ips[0]
	}

	initDone := true
	for i := range in.pod.Spec.InitContainers {
		c := &in.pod.Spec.InitContainers[i]
		cs := in.containerStatus(c, true)
		if !initComplete(c, &cs) {
			initDone = false
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	for i := range in.pod.Spec.Containers {
		c := &in.pod.Spec.Containers[i]
		st.ContainerStatuses = append(st.ContainerStatuses, in.containerStatus(c, false))
	}
	// As kubelet: once an app container ran, the pod stays initialized
	// while a sidecar restarts.
	for _, cs := range st.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			initDone = true
		}
	}
	sort.Slice(st.ContainerStatuses, func(i, j int) bool { return st.ContainerStatuses[i].Name < st.ContainerStatuses[j].Name })
	st.EphemeralContainerStatuses = in.ephemeralStatuses()
	if in.terminated {
		finalize(st.InitContainerStatuses)
		finalize(st.ContainerStatuses)
		finalize(st.EphemeralContainerStatuses)
	}
	st.Phase = podPhase(in.pod, st.InitContainerStatuses, st.ContainerStatuses, in.terminated, initDone)
	st.ObservedGeneration = in.pod.Generation
	st.Conditions = in.conditions(&st, initDone)
	return st
}

// initComplete reports whether init container c no longer holds the next
// back: a regular one succeeded, a sidecar started.
func initComplete(c *v1.Container, cs *v1.ContainerStatus) bool {
	if isSidecar(c) {
		return cs.Started != nil && *cs.Started
	}
	return cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0
}

// containerStatus is one container's status; init says it is an init
// container.
func (in *statusInput) containerStatus(c *v1.Container, init bool) v1.ContainerStatus {
	cs := v1.ContainerStatus{Name: c.Name, Image: c.Image}
	list := in.containers[c.Name]
	var cur *criContainer
	prev := list
	if len(list) > 0 && in.sandbox != nil && list[0].sandboxID == in.sandbox.id {
		cur, prev = list[0], list[1:]
	}
	if len(prev) > 0 && prev[0].state == runtimeapi.ContainerState_CONTAINER_EXITED {
		cs.LastTerminationState.Terminated = in.terminatedState(prev[0])
	}
	w := in.waiting[c.Name]
	switch {
	case cur == nil:
		cs.RestartCount = 0
		if len(prev) > 0 {
			cs.RestartCount = int32(prev[0].attempt) + 1
		}
		// kubelet's default for a container not created yet: every
		// container of a pod with init containers, the init containers
		// too, waits PodInitializing.
		reason := reasonContainerCreating
		if len(in.pod.Spec.InitContainers) > 0 {
			reason = reasonPodInitializing
		}
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: reason}
	case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
		cs.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cur.startedAt)}
		// As kubelet's prober manager: a regular init container is
		// ready only once it succeeded; the others per their probes.
		started, ready := true, !init || isSidecar(c)
		if in.probe != nil && ready {
			started, ready = in.probe(c, cur.id)
		}
		cs.Started, cs.Ready = &started, ready
		w = nil
	case cur.state == runtimeapi.ContainerState_CONTAINER_EXITED:
		t := in.terminatedState(cur)
		if w != nil {
			// Exited and to be started again: waiting, with the last
			// run as its last state.
			cs.LastTerminationState = v1.ContainerState{Terminated: t}
		} else {
			cs.State.Terminated = t
			cs.Ready = init && !isSidecar(c) && t.ExitCode == 0
		}
	case cur.state == runtimeapi.ContainerState_CONTAINER_CREATED:
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: reasonContainerCreating}
	default:
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: reasonContainerStatusUnknown}
	}
	if !init || isSidecar(c) {
		ac := in.allocatedContainer(c)
		cs.AllocatedResources = ac.Resources.Requests
		if cs.State.Running != nil {
			// Never nil for a running container: the API server takes a
			// missing one for a node that cannot resize.
			cs.Resources = statusResources(ac, cur.resources)
		}
	}
	if cur != nil {
		cs.RestartCount = int32(cur.attempt)
		cs.ContainerID = in.runtimeName + "://" + cur.id
		cs.ImageID = cur.imageRef
	} else if len(prev) > 0 {
		cs.ImageID = prev[0].imageRef
	}
	if w != nil && cs.State.Running == nil {
		cs.State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: w.reason, Message: w.message}}
	}
	if cs.State.Running == nil {
		started := false
		cs.Started = &started
	}
	return cs
}

func (in *statusInput) terminatedState(c *criContainer) *v1.ContainerStateTerminated {
	reason := c.reason
	if reason == "" {
		reason = reasonError
		if c.exitCode == 0 {
			reason = reasonCompleted
		}
	}
	t := &v1.ContainerStateTerminated{
		ExitCode:    c.exitCode,
		Reason:      reason,
		Message:     c.message,
		ContainerID: in.runtimeName + "://" + c.id,
	}
	if !c.startedAt.IsZero() {
		t.StartedAt = metav1.NewTime(c.startedAt)
	}
	if !c.finishedAt.IsZero() {
		t.FinishedAt = metav1.NewTime(c.finishedAt)
	}
	return t
}

// finalize makes every container of a deleted pod terminated: one that
// never ran or could not be found reads as kubelet reports it then.
func finalize(statuses []v1.ContainerStatus) {
	for i := range statuses {
		cs := &statuses[i]
		cs.Ready = false
		f := false
		cs.Started = &f
		if cs.State.Terminated != nil {
			continue
		}
		if cs.State.Running != nil || cs.LastTerminationState.Terminated == nil {
			cs.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: 137, Reason: reasonContainerStatusUnknown,
				Message: "The container could not be located when the pod was terminated",
			}}
			continue
		}
		cs.State = v1.ContainerState{Terminated: cs.LastTerminationState.Terminated}
		cs.LastTerminationState = v1.ContainerState{}
	}
}

// podPhase is kubelet's getPhase (with ContainerRestartRules, on by
// default since 1.35): whether a stopped container runs again is its own
// (containerShouldRestart). Sidecars count as running containers while
// they run; one that stopped counts for nothing, and one yet to start
// holds the pod Pending until it is initialized.
func podPhase(pod *v1.Pod, inits, apps []v1.ContainerStatus, terminated, initialized bool) v1.PodPhase {
	restarts := func(specs []v1.Container, i int, exitCode int32) bool {
		if i < len(specs) {
			return containerShouldRestart(&specs[i], &pod.Spec, exitCode)
		}
		return containerShouldRestart(&v1.Container{}, &pod.Spec, exitCode) // the pod's policy
	}
	var regularInits, sidecars []v1.ContainerStatus
	var regularSpecs []v1.Container
	for i, cs := range inits {
		if i < len(pod.Spec.InitContainers) && isSidecar(&pod.Spec.InitContainers[i]) {
			sidecars = append(sidecars, cs)
		} else {
			regularInits = append(regularInits, cs)
			if i < len(pod.Spec.InitContainers) {
				regularSpecs = append(regularSpecs, pod.Spec.InitContainers[i])
			}
		}
	}
	if terminated {
		for _, cs := range append(append([]v1.ContainerStatus{}, regularInits...), apps...) {
			if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
				return v1.PodFailed
			}
		}
		return v1.PodSucceeded
	}
	pendingInit := false
	for i, cs := range regularInits {
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
		case cs.State.Terminated != nil:
			if !restarts(regularSpecs, i, cs.State.Terminated.ExitCode) {
				return v1.PodFailed
			}
			pendingInit = true
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated != nil &&
			cs.LastTerminationState.Terminated.ExitCode != 0 && !restarts(regularSpecs, i, cs.LastTerminationState.Terminated.ExitCode):
			return v1.PodFailed
		default:
			pendingInit = true
		}
	}
	var running, waiting, stopped, stoppedForGood, succeeded int
	for _, cs := range sidecars {
		switch {
		case cs.State.Running != nil:
			running++
			if (cs.Started == nil || !*cs.Started) && !initialized {
				pendingInit = true
			}
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil:
			waiting++
			if !initialized {
				pendingInit = true
			}
		}
	}
	if pendingInit {
		return v1.PodPending
	}
	for i, cs := range apps {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if !restarts(pod.Spec.Containers, i, cs.State.Terminated.ExitCode) {
				stoppedForGood++
			}
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.State.Waiting != nil:
			if t := cs.LastTerminationState.Terminated; t != nil {
				stopped++
				if !restarts(pod.Spec.Containers, i, t.ExitCode) {
					stoppedForGood++
				}
			} else {
				waiting++
			}
		}
	}
	switch {
	case waiting > 0:
		return v1.PodPending
	case running > 0:
		return v1.PodRunning
	case stopped > 0:
		if stopped != stoppedForGood {
			return v1.PodRunning // some restart
		}
		if stopped == succeeded {
			return v1.PodSucceeded
		}
		return v1.PodFailed
	}
	return v1.PodPending
}

// ownCondition reports whether kubelet owns condition type t (kubelet's
// PodConditionsByKubelet): it computes these; the others (readiness gates',
// DisruptionTarget) are set by others and kept as the API server has them.
func ownCondition(t v1.PodConditionType) bool {
	switch t {
	case v1.PodScheduled, v1.PodReady, v1.PodInitialized, v1.ContainersReady, v1.PodReadyToStartContainers,
		v1.PodResizePending, v1.PodResizeInProgress:
		return true
	}
	return false
}

// externalConditions are those of conds that kubelet does not own.
func externalConditions(conds []v1.PodCondition) []v1.PodCondition {
	var out []v1.PodCondition
	for _, c := range conds {
		if !ownCondition(c.Type) {
			out = append(out, c)
		}
	}
	return out
}

// conditions are the pod's conditions; those kubelet does not own (and
// readiness gates) are kept from the pod as it was.
func (in *statusInput) conditions(st *v1.PodStatus, initDone bool) []v1.PodCondition {
	var conds []v1.PodCondition
	add := func(t v1.PodConditionType, ok bool, reason, msg string) {
		s := v1.ConditionFalse
		if ok {
			s = v1.ConditionTrue
			reason, msg = "", ""
		}
		conds = append(conds, v1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg})
	}
	add(v1.PodReadyToStartContainers, in.sandbox != nil && in.sandbox.ready && !in.terminated, "", "")
	var incomplete []string
	for i, cs := range st.InitContainerStatuses {
		if i < len(in.pod.Spec.InitContainers) && !initComplete(&in.pod.Spec.InitContainers[i], &cs) {
			incomplete = append(incomplete, cs.Name)
		}
	}
	add(v1.PodInitialized, initDone || st.Phase == v1.PodSucceeded && len(incomplete) == 0, "ContainersNotInitialized",
		fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(incomplete, " ")))
	// A sidecar's readiness counts as an app container's (kubelet lists
	// the sidecars first).
	var unready []string
	for i, cs := range st.InitContainerStatuses {
		if i < len(in.pod.Spec.InitContainers) && isSidecar(&in.pod.Spec.InitContainers[i]) && !cs.Ready {
			unready = append(unready, cs.Name)
		}
	}
	for _, cs := range st.ContainerStatuses {
		if !cs.Ready {
			unready = append(unready, cs.Name)
		}
	}
	reason, msg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed {
		reason, msg = "PodCompleted", ""
	}
	ready := len(unready) == 0 && st.Phase == v1.PodRunning
	add(v1.ContainersReady, ready, reason, msg)
	gatesOK, gateReason, gateMsg := true, reason, msg
	for _, g := range in.pod.Spec.ReadinessGates {
		ok := false
		for _, c := range in.pod.Status.Conditions {
			if c.Type == g.ConditionType && c.Status == v1.ConditionTrue {
				ok = true
			}
		}
		if !ok {
			gatesOK = false
			gateReason, gateMsg = "ReadinessGatesNotReady", fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", g.ConditionType)
		}
	}
	if ready && !gatesOK {
		reason, msg = gateReason, gateMsg
	}
	add(v1.PodReady, ready && gatesOK, reason, msg)
	add(v1.PodScheduled, true, "", "")
	if !in.terminated {
		conds = append(conds, in.resizeConditions()...)
	}

	// Keep transition times of unchanged conditions; keep others' conditions.
	for i := range conds {
		c := &conds[i]
		c.ObservedGeneration = in.pod.Generation
		c.LastTransitionTime = metav1.NewTime(in.now)
		for _, o := range in.pod.Status.Conditions {
			if o.Type == c.Type && o.Status == c.Status {
				c.LastTransitionTime = o.LastTransitionTime
				c.LastProbeTime = o.LastProbeTime
			}
		}
	}
	return append(conds, externalConditions(in.pod.Status.Conditions)...)
}
