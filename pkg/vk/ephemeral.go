package vk

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Ephemeral containers (kubectl debug), as kubelet runs them: each is
// started once the sandbox runs, even while init containers have yet to
// finish, and never again, whatever restartPolicy says or how it ended.
// It has no ports, probes, resources or lifecycle hooks (the API refuses
// them), and it counts for neither the pod's phase nor its readiness.
// One with targetContainerName joins that container's PID namespace (CRI
// NamespaceMode_TARGET), unless the whole pod shares one already.

// ephemeralSpec is the pod's ephemeral container named name as a
// container, nil if none.
func ephemeralSpec(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.EphemeralContainers {
		if ec := &pod.Spec.EphemeralContainers[i]; ec.Name == name {
			c := v1.Container(ec.EphemeralContainerCommon)
			return &c
		}
	}
	return nil
}

// ephemeralActions are the steps for the pod's ephemeral containers: each
// is started once, when the runtime holds no container of its name. As
// kubelet, that is in any of the pod's sandboxes (one that ran before the
// sandbox was made anew is not run again), and whatever its state (one
// whose start failed stays created, with the error as its waiting
// reason).
func (in *planInput) ephemeralActions() []containerAction {
	var out []containerAction
	for i := range in.pod.Spec.EphemeralContainers {
		ec := &in.pod.Spec.EphemeralContainers[i]
		if len(in.obs.containers[ec.Name]) > 0 {
			continue
		}
		c := v1.Container(ec.EphemeralContainerCommon)
		a := containerAction{kind: actionStart, c: &c}
		if t := ec.TargetContainerName; t != "" {
			// kubelet's getTargetID: the target's newest container in the
			// current sandbox, whatever its state.
			cur := in.obs.current(t)
			if cur == nil {
				a.kind, a.message = actionNoTarget, fmt.Sprintf("unable to find target container %s", t)
			} else {
				a.target = cur.id
			}
		}
		out = append(out, a)
	}
	return out
}

// targetNamespace makes an ephemeral container join the PID namespace of
// container target, as kubelet does when the container would otherwise
// have its own (the pod shares no PID namespace and is not hostPID).
func targetNamespace(ns *runtimeapi.NamespaceOption, target string) {
	if target == "" || ns == nil || ns.Pid != runtimeapi.NamespaceMode_CONTAINER {
		return
	}
	ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, target
}

// ephemeralStatuses are the statuses of the pod's ephemeral containers,
// sorted by name as kubelet sorts them. Each reads from its newest
// container, in whichever sandbox it ran: it never runs again.
func (in *statusInput) ephemeralStatuses() []v1.ContainerStatus {
	var out []v1.ContainerStatus
	for i := range in.pod.Spec.EphemeralContainers {
		ec := &in.pod.Spec.EphemeralContainers[i]
		cs := v1.ContainerStatus{Name: ec.Name, Image: ec.Image}
		started := false
		var cur *criContainer
		if l := in.containers[ec.Name]; len(l) > 0 {
			cur = l[0]
			cs.ContainerID = in.runtimeName + "://" + cur.id
			cs.ImageID = cur.imageRef
		}
		switch {
		case cur == nil || cur.state == runtimeapi.ContainerState_CONTAINER_CREATED:
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: reasonContainerCreating}
			if w := in.waiting[ec.Name]; w != nil {
				cs.State.Waiting = &v1.ContainerStateWaiting{Reason: w.reason, Message: w.message}
			}
		case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
			cs.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(cur.startedAt)}
			started = true
		case cur.state == runtimeapi.ContainerState_CONTAINER_EXITED:
			cs.State.Terminated = in.terminatedState(cur)
		default:
			cs.State.Waiting = &v1.ContainerStateWaiting{Reason: reasonContainerStatusUnknown}
		}
		cs.Started = &started
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
