package vk

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reasonRuntimeUnavailable is the Ready and ContainersReady conditions'
// reason while the node's runtime cannot be reached.
const reasonRuntimeUnavailable = "RuntimeUnavailable"

// markUnseen marks a pod whose containers cannot be seen (the node's
// runtime is not ready: the engine or cri-compose is away) as not Ready,
// keeping the rest of its last status, as the node lifecycle controller
// does to the pods of a node that stopped reporting (MarkPodsNotReady):
// Services stop sending it traffic, and nothing claims containers run
// that vk-cri cannot see. Kubelet itself would keep the last status; the
// controller does not run everywhere (envtest has none), and vk-cri knows
// sooner. prev is the status last reported, for the transition times.
func markUnseen(st, prev *v1.PodStatus, now time.Time) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != v1.PodReady && c.Type != v1.ContainersReady {
			continue
		}
		c.Status, c.Reason = v1.ConditionFalse, reasonRuntimeUnavailable
		c.Message = "the node's container runtime cannot be reached: the state of the pod's containers is unknown"
		c.LastTransitionTime = metav1.NewTime(now)
		if prev == nil {
			continue
		}
		for _, o := range prev.Conditions {
			if o.Type == c.Type && o.Status == v1.ConditionFalse {
				c.LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	for _, cs := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range cs {
			cs[i].Ready = false
		}
	}
}

// noteRuntimeReady records whether the node's runtime is ready (its Ready
// condition) and, when that changed, wakes every pod worker so that its
// pod's status follows at once rather than at the next resync.
func (p *Provider) noteRuntimeReady(c v1.NodeCondition) {
	down := c.Status != v1.ConditionTrue
	if p.runtimeDown.Swap(down) == down {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		w.poke()
	}
}
