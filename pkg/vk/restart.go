package vk

import (
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/flowcontrol"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// Kubelet's crash-loop and image-pull back-off: 10 s, doubling to 5 min;
// an entry is forgotten once nothing failed for twice the maximum.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
)

// backoff is kubelet's flowcontrol.Backoff used the way kubelet uses it:
// the first failure is retried at once, each later one after the current
// delay counted from when it failed, and the delay doubles per retry.
type backoff struct {
	mu sync.Mutex
	b  *flowcontrol.Backoff
	c  clock.Clock
	// lastFail is when each key last failed, for failures that leave
	// nothing behind to tell the time (image pulls).
	lastFail map[string]time.Time
}

func newBackoff(c clock.Clock, initial, max time.Duration) *backoff {
	if c == nil {
		c = clock.RealClock{}
	}
	b := flowcontrol.NewBackOff(initial, max)
	b.Clock = c
	return &backoff{b: b, c: c, lastFail: map[string]time.Time{}}
}

// ready reports whether what failed at failedAt may be retried now; when
// not, wait is how long until it may. A key seen for the first time is
// ready at once.
func (b *backoff) ready(key string, failedAt time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.IsInBackOffSince(key, failedAt) {
		return false, b.b.Get(key) - b.c.Since(failedAt)
	}
	return true, 0
}

// restarted records a retry of what failed at failedAt: the next failure
// waits twice as long (up to the maximum).
func (b *backoff) restarted(key string, failedAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Next(key, failedAt)
}

// failed records a failure at at, to be retried once retryReady says so.
func (b *backoff) failed(key string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastFail[key] = at
	b.b.Next(key, at)
}

// retryReady is ready for failures recorded with failed.
func (b *backoff) retryReady(key string) (ok bool, wait time.Duration) {
	b.mu.Lock()
	at, seen := b.lastFail[key]
	b.mu.Unlock()
	if !seen {
		return true, 0
	}
	return b.ready(key, at)
}

// delay is key's current back-off.
func (b *backoff) delay(key string) time.Duration {
	return b.b.Get(key)
}

func (b *backoff) reset(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Reset(key)
	delete(b.lastFail, key)
}

// gc forgets entries that have not failed for long.
func (b *backoff) gc() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.GC()
	for k, at := range b.lastFail {
		if b.c.Since(at) > 2*backoffMax {
			delete(b.lastFail, k)
		}
	}
}

// containerShouldRestart reports whether container c of spec, which
// exited with exitCode, is started again. It is kubelet's
// ContainerShouldRestart (ContainerRestartRules, on by default since
// Kubernetes 1.35): c's restartPolicyRules first, in order, the first
// whose exit codes match deciding; then c's own restartPolicy; then the
// pod's. A rule's RestartAllContainers action belongs to an alpha gate
// kubelet leaves off, so it falls through to the policies, as there.
func containerShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if rule, ok := matchingRestartRule(c, exitCode); ok && rule.Action == v1.ContainerRestartRuleActionRestart {
			return true
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

// matchingRestartRule is the first of c's restartPolicyRules whose exit
// codes match exitCode (kubelet's FindMatchingContainerRestartRule).
func matchingRestartRule(c *v1.Container, exitCode int32) (v1.ContainerRestartRule, bool) {
	for _, rule := range c.RestartPolicyRules {
		if rule.ExitCodes == nil {
			continue
		}
		in := slices.Contains(rule.ExitCodes.Values, exitCode)
		switch rule.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return rule, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return rule, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}

// restartsAfterKill reports whether c, still running, comes back after a
// kill for a failed probe: its own restartPolicy when it has one (its
// rules need an exit code, which a running container has not), else the
// pod's (kubelet's computePodActions).
func restartsAfterKill(c *v1.Container, spec *v1.PodSpec) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy != v1.ContainerRestartPolicyNever
	}
	return spec.RestartPolicy != v1.RestartPolicyNever
}

// initRestarts reports whether regular init container c, which did not
// succeed (cur), is run again rather than fail the pod: by its exit code
// when it exited, else (its state unknown) by the policies alone.
func initRestarts(c *v1.Container, spec *v1.PodSpec, cur *criContainer) bool {
	if cur.state == runtimeapi.ContainerState_CONTAINER_EXITED {
		return containerShouldRestart(c, spec, cur.exitCode)
	}
	return restartsAfterKill(c, spec)
}
