package vk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

const (
	// syncTimeout bounds one pass of a worker (an image pull included).
	syncTimeout = 10 * time.Minute
	// retryAfterError is when a pass that failed on the runtime is tried
	// again.
	retryAfterError = 2 * time.Second
	// keepDead is how many exited containers of each name are kept (the
	// current and the previous, for `kubectl logs --previous`).
	keepDead = 2
	// maxTerminationMessage is kubelet's limit on a termination message.
	maxTerminationMessage = 4096
	// Events kubelet records as it makes a container (the e2e suite waits
	// for Started), and when a container or the sandbox cannot be made.
	eventCreated                = "Created"
	eventStarted                = "Started"
	eventFailed                 = "Failed"
	eventFailedCreatePodSandBox = "FailedCreatePodSandBox"
	eventFailedMount            = "FailedMount"
)

// podWorker drives one pod's sandbox and containers toward its spec, one
// pass at a time: when its pod changes, when the runtime reports one of
// its containers changed, when a back-off ends, and every resync period.
// Each pass reads the pod's state back from the runtime, acts, and reports
// the status when it changed.
type podWorker struct {
	p *Provider

	mu         sync.Mutex
	spec       *v1.Pod       // latest pod from Kubernetes
	status     *v1.PodStatus // last reported
	state      podState      // only moves forward (advance)
	grace      int64
	cancelPass context.CancelFunc
	startTime  time.Time
	// deadlineHit: the pod ran past its activeDeadlineSeconds, and is
	// Failed for it whatever its containers did after.
	deadlineHit bool
	killMsgs    map[string]string // container id → why vk-cri killed it (hooks.go)
	// rejected is the status of a pod admission refused (admission.go):
	// nothing of it runs, and this is all it reports.
	rejected *v1.PodStatus
	// resize is what the node granted the pod, and how a resize stands
	// (resize.go).
	resize resizeState

	wake     chan struct{}
	finished chan struct{}
	probes   *probeSet // the running containers' probes (probes_manager.go)

	// Owned by the worker's goroutine.
	next        time.Duration // wake after this (0: resync only)
	waiting     map[string]*waiting
	specChanged map[string]bool // killed for a new spec: restart at once
	reported    bool            // report has run once
	cleared     bool            // a rejected pod's leftovers are removed
	startTimed  bool            // the start latency is recorded (metrics.go)
}

func newPodWorker(p *Provider, pod *v1.Pod) *podWorker {
	w := &podWorker{
		p: p, spec: pod,
		startTime:   p.clock.Now(),
		killMsgs:    map[string]string{},
		wake:        make(chan struct{}, 1),
		finished:    make(chan struct{}),
		waiting:     map[string]*waiting{},
		specChanged: map[string]bool{},
	}
	// A probe result that changes wakes the worker: readiness changes
	// the status, a liveness failure kills the container.
	w.probes = newProbeSet(p.clock, p.runner.probe, w.poke)
	w.probes.started = p.started
	w.probes.event = func(t *probeTarget, warn bool, reason, msg string) {
		p.containerEvent(t.pod, t.c.Name, warn, reason, msg)
	}
	return w
}

func (w *podWorker) pod() *v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.spec
}

// podWithStatus is the pod as last reported.
func (w *podWorker) podWithStatus() *v1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	pod := w.spec.DeepCopy()
	if w.status != nil {
		pod.Status = *w.status.DeepCopy()
	}
	return pod
}

func (w *podWorker) setPod(pod *v1.Pod) {
	w.mu.Lock()
	w.spec = pod.DeepCopy()
	w.mu.Unlock()
	w.poke()
}

// Kubelet's words for a pod past its activeDeadlineSeconds.
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadline reports whether the pod has run activeDeadlineSeconds
// since its start, as kubelet's active deadline handler (a Normal event
// says so once); the worker then stops its containers as for any terminal
// pod. st is Failed with DeadlineExceeded once none runs: the pod
// controller writes no status of a pod the API server has terminal, so a
// Failed phase beside a running container would stay so. Until the
// deadline, it wakes the worker then (an update of the pod may move it).
func (w *podWorker) activeDeadline(pod *v1.Pod, st *v1.PodStatus) bool {
	w.mu.Lock()
	hit := w.deadlineHit
	w.mu.Unlock()
	if !hit {
		d := pod.Spec.ActiveDeadlineSeconds
		if d == nil || st.StartTime == nil || st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed {
			return false
		}
		left := time.Duration(*d)*time.Second - w.p.clock.Since(st.StartTime.Time)
		if left > 0 {
			w.wakeAfter(left)
			return false
		}
		w.mu.Lock()
		w.deadlineHit = true
		w.mu.Unlock()
		w.p.podEvent(pod, false, reasonDeadlineExceeded, messageDeadlineExceeded)
	}
	for _, cs := range append(slices.Clone(st.InitContainerStatuses), st.ContainerStatuses...) {
		if cs.State.Running != nil {
			return true
		}
	}
	st.Phase, st.Reason, st.Message = v1.PodFailed, reasonDeadlineExceeded, messageDeadlineExceeded
	return true
}

// lastStatus is a copy of the status the worker last reported, or nil.
func (w *podWorker) lastStatus() *v1.PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status == nil {
		return nil
	}
	return w.status.DeepCopy()
}

// seeStatus takes, from the pod as the API server now has it, the
// conditions that are not kubelet's own (those of readiness gates, set by
// controllers), and wakes the worker when they changed: as kubelet's, the
// Ready condition follows them, and the status written keeps them.
// virtual-kubelet's pod controller passes on changes of the spec only.
func (w *podWorker) seeStatus(pod *v1.Pod) {
	w.mu.Lock()
	changed := pod.UID == w.spec.UID &&
		!equality.Semantic.DeepEqual(externalConditions(w.spec.Status.Conditions), externalConditions(pod.Status.Conditions))
	if changed {
		w.spec.Status.Conditions = pod.Status.DeepCopy().Conditions
	}
	w.mu.Unlock()
	if changed {
		w.poke()
	}
}

// delete makes the worker stop and remove the pod, within grace seconds.
func (w *podWorker) delete(grace int64) {
	w.mu.Lock()
	// A repeated deletion (virtual-kubelet's pod controller passes one on
	// for every update of a deleted pod) leaves a kill under way alone,
	// unless it shortens the grace period.
	again := w.state == podDeleting && grace >= w.grace
	if !again {
		w.grace = grace
	}
	w.state = podDeleting
	if w.cancelPass != nil && !again {
		w.cancelPass() // an image pull, say, is not worth finishing
	}
	w.mu.Unlock()
	w.poke()
}

// lifecycle is where the pod is in its life.
func (w *podWorker) lifecycle() podState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// advance moves the pod's state forward to s, never back (a deleted pod
// stays deleted); it reports whether it moved.
func (w *podWorker) advance(s podState) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s <= w.state {
		return false
	}
	w.state = s
	return true
}

// poke wakes the worker for a pass.
func (w *podWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// wakeAfter asks for a pass after d at the latest.
func (w *podWorker) wakeAfter(d time.Duration) {
	if d <= 0 {
		d = 10 * time.Millisecond
	}
	if w.next == 0 || d < w.next {
		w.next = d
	}
}

func (w *podWorker) run(ctx context.Context) {
	defer close(w.finished)
	defer w.probes.stopAll()
	timer := w.p.clock.NewTimer(0)
	defer timer.Stop()
	<-timer.C()
	for {
		done := w.pass(ctx)
		if done {
			w.p.forget(w)
			return
		}
		d := w.p.cfg.ResyncPeriod
		if w.next > 0 && w.next < d {
			d = w.next
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
			if !timer.Stop() {
				select {
				case <-timer.C():
				default:
				}
			}
		case <-timer.C():
		}
	}
}

// pass is one round of work; it reports whether the pod is gone for good.
func (w *podWorker) pass(parent context.Context) (done bool) {
	ctx, cancel := context.WithTimeout(parent, syncTimeout)
	defer cancel()
	w.mu.Lock()
	w.cancelPass = cancel
	state, grace := w.state, w.grace
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.cancelPass = nil
		w.mu.Unlock()
	}()
	w.next = 0
	pod := w.pod()
	if w.rejection() != nil && state != podDeleting {
		w.passRejected(ctx, pod)
		return false
	}
	if state == podDeleting {
		w.probes.terminate()
		obs, err := w.kill(ctx, grace)
		if err != nil && errors.Is(ctx.Err(), context.Canceled) && parent.Err() == nil {
			w.wakeAfter(0) // cut short by a shorter grace period: again at once
			return false
		}
		if err != nil {
			if parent.Err() == nil {
				klog.ErrorS(err, "Deleting pod; will retry", "pod", klog.KObj(pod))
			}
			w.wakeAfter(retryAfterError)
			return false
		}
		w.probes.stopAll() // nothing of the pod runs
		w.report(obs, true)
		klog.V(2).InfoS("Pod removed from the runtime", "pod", klog.KObj(pod), "uid", pod.UID)
		final := w.lastStatus()
		w.p.rememberFinished(pod.UID, final)
		if pod.DeletionTimestamp != nil {
			// As kubelet: the last status first, then, once nothing of
			// the pod runs, the API object goes at once rather than when
			// the grace period ends.
			w.p.writeFinalStatus(ctx, pod, final)
			w.p.deleteFromAPI(ctx, pod)
		}
		return true
	}
	var obs *observation
	var err error
	for range 8 { // act, then look again, until nothing is left to do now
		var acted bool
		obs, acted, err = w.syncPod(ctx)
		if err != nil || !acted {
			break
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			klog.ErrorS(err, "Pod sync failed; will retry", "pod", klog.KObj(pod))
		}
		w.wakeAfter(retryAfterError)
	}
	if obs != nil {
		w.syncProbes(parent, pod, obs)
		w.forgetKills(obs)
		w.report(obs, false)
	} else if w.p.runtimeDown.Load() {
		w.reportUnseen()
	}
	return false
}

// report computes the pod's status from obs and passes it on if changed.
func (w *podWorker) report(obs *observation, terminated bool) {
	w.mu.Lock()
	pod := w.spec.DeepCopy()
	if w.status != nil {
		// The last status computed, with the conditions of others as
		// the API server has them now.
		api := pod.Status.Conditions
		pod.Status = *w.status.DeepCopy()
		pod.Status.Conditions = append(slices.DeleteFunc(pod.Status.Conditions, func(c v1.PodCondition) bool { return !ownCondition(c.Type) }),
			externalConditions(api)...)
	}
	prevPhase := pod.Status.Phase
	start := w.startTime
	rejected := w.rejected
	rs := w.resize
	w.mu.Unlock()
	var st v1.PodStatus
	if rejected != nil {
		st = *rejected.DeepCopy()
	} else {
		st = computeStatus(statusInput{
			pod: pod, runtimeName: w.p.runtimeName, hostIPs: w.p.cfg.NodeIPs,
			sandbox: obs.sandboxInfo(), containers: obs.containers, waiting: w.waiting,
			terminated: terminated, startTime: start, now: w.p.clock.Now(),
			probe:     w.probes.state,
			allocated: rs.alloc, resizePending: rs.pending, resizeFailed: rs.failed,
		})
		if w.activeDeadline(pod, &st) && w.advance(podTerminal) {
			w.wakeAfter(0) // to stop its containers
		}
	}
	if w.p.runtimeDown.Load() && !terminated && rejected == nil {
		// What the runtime still answers may be stale (cri-compose
		// answers lists from its store while the engine is away).
		markUnseen(&st, &pod.Status, w.p.clock.Now())
	}
	w.mu.Lock()
	changed := w.status == nil || !equality.Semantic.DeepEqual(*w.status, st)
	w.status = &st
	w.mu.Unlock()
	w.observePodStart(pod, prevPhase, &st)
	if (st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed) && w.advance(podTerminal) {
		w.wakeAfter(0) // to stop the sandbox
	}
	if changed {
		pod.Status = st
		klog.V(3).InfoS("Pod status", "pod", klog.KObj(pod), "phase", st.Phase, "podIP", st.PodIP)
		w.p.notifyPod(pod)
	}
}

// reportUnseen reports the last status, not Ready (markUnseen), when the
// runtime cannot be reached to read the pod's state.
func (w *podWorker) reportUnseen() {
	w.mu.Lock()
	if w.status == nil {
		w.mu.Unlock()
		return
	}
	prev := w.status
	st := prev.DeepCopy()
	markUnseen(st, prev, w.p.clock.Now())
	changed := !equality.Semantic.DeepEqual(*prev, *st)
	w.status = st
	pod := w.spec.DeepCopy()
	w.mu.Unlock()
	if changed {
		pod.Status = *st
		klog.V(2).InfoS("Pod not Ready: the runtime cannot be reached", "pod", klog.KObj(pod))
		w.p.notifyPod(pod)
	}
}

// observation is the pod's state in the runtime.
type observation struct {
	sandboxes []*runtimeapi.PodSandbox // newest first
	sandbox   *runtimeapi.PodSandboxStatus
	// containers by name, newest first, across all the pod's sandboxes.
	containers map[string][]*criContainer
}

func (o *observation) sandboxInfo() *sandboxInfo {
	if o.sandbox == nil {
		return nil
	}
	si := &sandboxInfo{id: o.sandbox.Id, ready: o.sandbox.State == runtimeapi.PodSandboxState_SANDBOX_READY}
	if n := o.sandbox.GetNetwork(); n != nil {
		if n.Ip != "" {
			si.ips = append(si.ips, n.Ip)
		}
		for _, ip := range n.AdditionalIps {
			si.ips = append(si.ips, ip.GetIp())
		}
	}
	return si
}

// current is the container named name in the current sandbox, if any.
func (o *observation) current(name string) *criContainer {
	l := o.containers[name]
	if len(l) == 0 || o.sandbox == nil || l[0].sandboxID != o.sandbox.Id {
		return nil
	}
	return l[0]
}

// nextAttempt is the attempt number of the next container named name.
func (o *observation) nextAttempt(name string) uint32 {
	if l := o.containers[name]; len(l) > 0 {
		return l[0].attempt + 1
	}
	return 0
}

// observe reads the pod's sandboxes and containers from the runtime.
func (w *podWorker) observe(ctx context.Context) (*observation, error) {
	pod := w.pod()
	sel := map[string]string{labelPodUID: string(pod.UID)}
	sbs, err := w.p.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	sort.Slice(sbs, func(i, j int) bool {
		if a, b := sbs[i].GetMetadata().GetAttempt(), sbs[j].GetMetadata().GetAttempt(); a != b {
			return a > b
		}
		return sbs[i].CreatedAt > sbs[j].CreatedAt
	})
	obs := &observation{sandboxes: sbs, containers: map[string][]*criContainer{}}
	if len(sbs) > 0 {
		st, err := w.p.rt.PodSandboxStatus(ctx, sbs[0].Id, false)
		switch {
		case isNotFound(err):
			obs.sandboxes = sbs[1:]
		case err != nil:
			return nil, fmt.Errorf("sandbox status %s: %w", sbs[0].Id, err)
		default:
			obs.sandbox = st.GetStatus()
		}
	}
	cs, err := w.p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	sort.Slice(cs, func(i, j int) bool {
		if a, b := cs[i].GetMetadata().GetAttempt(), cs[j].GetMetadata().GetAttempt(); a != b {
			return a > b
		}
		return cs[i].CreatedAt > cs[j].CreatedAt
	})
	for _, c := range cs {
		name := c.GetMetadata().GetName()
		cc := &criContainer{
			id: c.Id, name: name, sandboxID: c.PodSandboxId, attempt: c.GetMetadata().GetAttempt(),
			state: c.State, createdAt: time.Unix(0, c.CreatedAt), imageRef: c.ImageRef,
			hash: c.Annotations[annotationContainerHash], hashNoResources: c.Annotations[annotationContainerHashNoResources],
			memoryRequest: w.actuatedMemoryRequest(c.Id, c.Annotations[annotationMemoryRequest]),
		}
		if len(obs.containers[name]) < keepDead {
			st, err := w.p.rt.ContainerStatus(ctx, c.Id, false)
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("container status %s: %w", c.Id, err)
			}
			fillStatus(cc, st.GetStatus())
			if cc.state == runtimeapi.ContainerState_CONTAINER_EXITED && cc.message == "" {
				cc.message = w.terminationMessage(cc)
			}
		}
		obs.containers[name] = append(obs.containers[name], cc)
	}
	return obs, nil
}

func fillStatus(cc *criContainer, s *runtimeapi.ContainerStatus) {
	if s == nil {
		return
	}
	cc.state = s.State
	cc.exitCode = s.ExitCode
	cc.reason, cc.message = s.Reason, s.Message
	cc.logPath = s.LogPath
	if s.ImageRef != "" {
		cc.imageRef = s.ImageRef
	}
	if s.StartedAt > 0 {
		cc.startedAt = time.Unix(0, s.StartedAt)
	}
	if s.FinishedAt > 0 {
		cc.finishedAt = time.Unix(0, s.FinishedAt)
	}
	if h := s.Annotations[annotationContainerHash]; h != "" {
		cc.hash = h
	}
	if h := s.Annotations[annotationContainerHashNoResources]; h != "" {
		cc.hashNoResources = h
	}
	cc.resources = s.GetResources().GetLinux()
}

// terminationFile is the host file a container's terminationMessagePath
// is mounted from.
func (w *podWorker) terminationFile(name string, attempt uint32) string {
	return filepath.Join(podDir(w.p.cfg.StateDir, w.pod().UID), "containers", name, strconv.FormatUint(uint64(attempt), 10)+"-termination-log")
}

// writeTerminationFile creates the empty file for a container's
// termination message, writable by any user, as kubelet's: the container
// may run as any uid, and the umask would leave it the owner's alone. It
// is reached only through the container's bind mount; the pod's folders
// above it stay closed to the host's other users.
func writeTerminationFile(path string) error {
	if err := os.WriteFile(path, nil, 0o666); err != nil {
		return err
	}
	return os.Chmod(path, 0o666) //nolint:gosec // kubelet's mode: any container user writes its message
}

func (w *podWorker) terminationMessage(c *criContainer) string {
	msg := ""
	if f, err := os.Open(w.terminationFile(c.name, c.attempt)); err == nil {
		b := make([]byte, maxTerminationMessage)
		n, _ := f.Read(b)
		f.Close()
		msg = string(b[:n])
	}
	if msg == "" && c.exitCode != 0 {
		if spec := specOf(w.pod(), c.name); spec != nil && spec.TerminationMessagePolicy == v1.TerminationMessageFallbackToLogsOnError {
			msg = w.logTail(c)
		}
	}
	if msg == "" {
		msg = w.killMessage(c.id) // killed for a failed probe, say
	}
	return msg
}

// syncPod is one step toward the spec: it reads the pod's state, removes
// what is dead, decides (computePodActions) and acts (applyPodActions).
// acted tells that it changed something in the runtime, so that the state
// is worth reading again.
func (w *podWorker) syncPod(ctx context.Context) (obs *observation, acted bool, err error) {
	pod := w.pod()
	if obs, err = w.observe(ctx); err != nil {
		return nil, false, err
	}
	w.removeDead(ctx, obs)
	pod = w.allocatedPod(pod, w.lifecycle() == podActive)
	plan := computePodActions(planInput{
		pod: pod, obs: obs, state: w.lifecycle(), specChanged: w.specChanged,
		probes: w.probes, backoff: w.p.backoff,
	})
	results, acted, err := w.applyPodActions(ctx, pod, obs, plan)
	w.record(results)
	return obs, acted, err
}

// removeDead removes exited containers beyond the newest keepDead of each
// name, and sandboxes older than the current one that hold none of those.
func (w *podWorker) removeDead(ctx context.Context, obs *observation) {
	keep := map[string]bool{}
	for name, l := range obs.containers {
		for i, c := range l {
			if i < keepDead || c.state != runtimeapi.ContainerState_CONTAINER_EXITED {
				keep[c.sandboxID] = true
				continue
			}
			if err := w.p.rt.RemoveContainer(ctx, c.id); err != nil && !isNotFound(err) {
				klog.V(2).InfoS("Removing dead container", "container", name, "id", c.id, "err", err)
				continue
			}
			w.p.removeContainerLogs(w.p.podLogDir(w.pod()), c.logPath)
		}
		if len(l) > keepDead {
			obs.containers[name] = l[:keepDead]
		}
	}
	for i, sb := range obs.sandboxes {
		if i == 0 || keep[sb.Id] || sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := w.p.rt.RemovePodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
			klog.V(2).InfoS("Removing old sandbox", "sandbox", sb.Id, "err", err)
		}
	}
}

// stopWatching stops the containers as stopContainers does, and meanwhile
// reports the pod's status whenever a readiness probe's result changes:
// a container that turns unready while it handles SIGTERM is shown so
// (and taken out of its Services' endpoints) before it has ended.
func (w *podWorker) stopWatching(ctx context.Context, pod *v1.Pod, stop []*criContainer, grace int64) error {
	done := make(chan error, 1)
	go func() { done <- w.stopContainers(ctx, pod, stop, grace) }()
	for {
		select {
		case err := <-done:
			return err
		case <-w.wake:
			if obs, err := w.observe(ctx); err == nil {
				w.report(obs, false)
			}
		}
	}
}

// kill stops the pod's containers, giving each grace seconds after
// SIGTERM, then stops and removes its sandboxes and its files. It returns
// what the containers looked like once stopped, for the final status.
func (w *podWorker) kill(ctx context.Context, grace int64) (*observation, error) {
	pod := w.pod()
	obs, err := w.observe(ctx)
	if err != nil {
		return nil, err
	}
	plan := computePodActions(planInput{pod: pod, obs: obs, state: podDeleting})
	if err := w.stopWatching(ctx, pod, plan.stop, grace); err != nil {
		return nil, err
	}
	if obs, err = w.observe(ctx); err != nil { // the exit codes
		return nil, err
	}
	for _, sb := range obs.sandboxes {
		if err := w.p.rt.StopPodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
			return nil, fmt.Errorf("stop sandbox %s: %w", sb.Id, err)
		}
		if err := w.p.rt.RemovePodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
			return nil, fmt.Errorf("remove sandbox %s: %w", sb.Id, err)
		}
	}
	// Containers left outside any sandbox we saw (should not happen).
	left, err := w.p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: string(pod.UID)}})
	if err == nil {
		for _, c := range left {
			_ = w.p.rt.RemoveContainer(ctx, c.Id)
		}
	}
	err = errors.Join(removePodDir(podDir(w.p.cfg.StateDir, pod.UID)), os.RemoveAll(w.p.podLogDir(pod)))
	if err != nil {
		klog.ErrorS(err, "Removing the pod's files", "pod", klog.KObj(pod))
	}
	for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		w.p.backoff.reset(crashKey(pod, c.Name))
		w.p.backoff.reset(configKey(pod, c.Name))
	}
	w.p.backoff.reset(sandboxKey(pod))
	return obs, nil
}
