package vk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// Events kubelet records when a container or the sandbox cannot be
	// made.
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
	deleting   bool
	grace      int64
	cancelPass context.CancelFunc
	startTime  time.Time
	killMsgs   map[string]string // container id → why vk-cri killed it (hooks.go)

	wake     chan struct{}
	finished chan struct{}
	probes   *probeSet // the running containers' probes (probes_manager.go)

	// Owned by the worker's goroutine.
	next        time.Duration // wake after this (0: resync only)
	waiting     map[string]*waiting
	terminal    bool            // reached Succeeded or Failed: nothing restarts
	specChanged map[string]bool // killed for a new spec: restart at once
	reported    bool            // report has run once
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

// delete makes the worker stop and remove the pod, within grace seconds.
func (w *podWorker) delete(grace int64) {
	w.mu.Lock()
	if !w.deleting || grace < w.grace {
		w.grace = grace
	}
	w.deleting = true
	if w.cancelPass != nil {
		w.cancelPass() // an image pull, say, is not worth finishing
	}
	w.mu.Unlock()
	w.poke()
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
	deleting, grace := w.deleting, w.grace
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.cancelPass = nil
		w.mu.Unlock()
	}()
	w.next = 0
	pod := w.pod()
	if deleting {
		w.probes.stopAll() // kubelet stops probing a pod it terminates
		obs, err := w.kill(ctx, grace)
		if err != nil {
			if parent.Err() == nil {
				klog.ErrorS(err, "Deleting pod; will retry", "pod", klog.KObj(pod))
			}
			w.wakeAfter(retryAfterError)
			return false
		}
		w.report(obs, true)
		klog.V(2).InfoS("Pod removed from the runtime", "pod", klog.KObj(pod), "uid", pod.UID)
		if pod.DeletionTimestamp != nil {
			// As kubelet: once nothing of the pod runs, the API object
			// goes at once rather than when the grace period ends.
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
		pod.Status = *w.status
	}
	prevPhase := pod.Status.Phase
	start := w.startTime
	w.mu.Unlock()
	st := computeStatus(statusInput{
		pod: pod, runtimeName: w.p.runtimeName, hostIPs: w.p.cfg.NodeIPs,
		sandbox: obs.sandboxInfo(), containers: obs.containers, waiting: w.waiting,
		terminated: terminated, startTime: start, now: w.p.clock.Now(),
		probe: w.probes.state,
	})
	if w.p.runtimeDown.Load() && !terminated {
		// What the runtime still answers may be stale (cri-compose
		// answers lists from its store while the engine is away).
		markUnseen(&st, &pod.Status, w.p.clock.Now())
	}
	w.mu.Lock()
	changed := w.status == nil || !equality.Semantic.DeepEqual(*w.status, st)
	w.status = &st
	w.mu.Unlock()
	w.observePodStart(pod, prevPhase, &st)
	if (st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed) && !w.terminal {
		w.terminal = true
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
			hash: c.Annotations[annotationContainerHash],
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
}

// terminationFile is the host file a container's terminationMessagePath
// is mounted from.
func (w *podWorker) terminationFile(name string, attempt uint32) string {
	return filepath.Join(podDir(w.p.cfg.StateDir, w.pod().UID), "containers", name, strconv.FormatUint(uint64(attempt), 10)+"-termination-log")
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

// syncPod is one step toward the spec. acted tells that it changed
// something in the runtime, so that the state is worth reading again.
func (w *podWorker) syncPod(ctx context.Context) (obs *observation, acted bool, err error) {
	pod := w.pod()
	if obs, err = w.observe(ctx); err != nil {
		return nil, false, err
	}
	w.removeDead(ctx, obs)
	sb := obs.sandboxInfo()
	if w.terminal {
		if sb != nil && sb.ready {
			// What still runs (sidecars) stops as at deletion: preStop
			// hooks, the sidecars last.
			if left := obs.notExited(); len(left) > 0 {
				klog.V(2).InfoS("Pod finished; stopping its remaining containers", "pod", klog.KObj(pod), "containers", len(left))
				if err := w.stopContainers(ctx, pod, left, podGrace(pod)); err != nil {
					return obs, false, err
				}
				return obs, true, nil
			}
			klog.V(2).InfoS("Pod finished; stopping its sandbox", "pod", klog.KObj(pod))
			if err := w.p.rt.StopPodSandbox(ctx, sb.id); err != nil && !isNotFound(err) {
				return obs, false, fmt.Errorf("stop sandbox %s: %w", sb.id, err)
			}
			return obs, true, nil
		}
		return obs, false, nil
	}

	// The sandbox: made when missing, made anew when it died (the
	// containers then start over, init containers first), unless the
	// pod's containers already ran and restartPolicy is Never.
	if sb == nil || !sb.ready {
		if sb != nil && pod.Spec.RestartPolicy == v1.RestartPolicyNever && len(obs.containers) > 0 {
			w.terminal = true
			return obs, false, nil
		}
		if err := w.runSandbox(ctx, obs); err != nil {
			return obs, false, err
		}
		return obs, true, nil
	}
	vols, err := setUpVolumes(podDir(w.p.cfg.StateDir, pod.UID), pod, w.p.objects, w.p.mem)
	if err != nil {
		w.volumesFailed(pod, err)
		w.wakeAfter(backoffInitial)
		return obs, false, nil
	}
	sbCfg, err := w.p.makeSandboxConfig(pod, obs.sandboxes[0].GetMetadata().GetAttempt())
	if err != nil {
		return obs, false, err
	}
	env := startEnv{sandboxID: sb.id, sandbox: sbCfg, volumes: vols, ips: podIPs{podIPs: sb.ips, hostIPs: w.p.cfg.NodeIPs}}
	if pod.Spec.HostNetwork {
		env.ips.podIPs = w.p.cfg.NodeIPs
	}

	initialized := obs.initialized(pod)
	if initialized && w.appsDone(pod, obs) {
		// As kubelet: the pod is done, and its sidecars are not restarted
		// to keep it alive.
		klog.V(2).InfoS("Pod's containers finished", "pod", klog.KObj(pod))
		w.terminal = true
		return obs, true, nil
	}

	// Init containers, one after the other: each regular one to success,
	// each sidecar until it has started. Once the app containers were
	// started, only the sidecars are kept running.
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if isSidecar(c) {
			started, acted, err := w.syncSidecar(ctx, pod, c, obs, env)
			if err != nil || acted && !initialized {
				return obs, acted, err
			}
			if !started && !initialized {
				return obs, false, nil // the next waits for it to start
			}
			if acted {
				return obs, true, nil // look again before the rest
			}
			continue
		}
		if initialized {
			continue
		}
		cur := obs.current(c.Name)
		switch {
		case cur == nil:
			return obs, w.start(ctx, pod, c, true, obs.nextAttempt(c.Name), env), nil
		case cur.state == runtimeapi.ContainerState_CONTAINER_CREATED:
			return obs, w.startCreated(ctx, pod, cur), nil
		case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
			return obs, false, nil // wait for it to exit
		case cur.state == runtimeapi.ContainerState_CONTAINER_EXITED && cur.exitCode == 0:
			delete(w.waiting, c.Name)
			continue
		case pod.Spec.RestartPolicy == v1.RestartPolicyNever:
			w.terminal = true // the pod failed
			return obs, false, nil
		default:
			return obs, w.restart(ctx, pod, c, true, cur, obs, env), nil
		}
	}

	// App containers, all at once.
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cur := obs.current(c.Name)
		switch {
		case cur == nil:
			acted = w.start(ctx, pod, c, false, obs.nextAttempt(c.Name), env) || acted
		case cur.state == runtimeapi.ContainerState_CONTAINER_CREATED:
			acted = w.startCreated(ctx, pod, cur) || acted
		case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING && w.probeFailed(cur.id):
			kind, _ := w.probes.failed(cur.id)
			probe := c.LivenessProbe
			if kind == probeStartup {
				probe = c.StartupProbe
			}
			klog.InfoS("Container failed its probe; killing it", "pod", klog.KObj(pod), "container", c.Name, "probe", kind)
			if err := w.killContainer(ctx, pod, c, cur.id, probeGrace(pod, probe), probeKillMessage(pod, c, kind), nil); err != nil {
				return obs, acted, err
			}
			acted = true
		case cur.state == runtimeapi.ContainerState_CONTAINER_RUNNING:
			if cur.hash != "" && cur.hash != containerHash(c) {
				klog.InfoS("Container spec changed; restarting it", "pod", klog.KObj(pod), "container", c.Name)
				w.specChanged[c.Name] = true
				if err := w.stopContainer(ctx, pod, c, cur.id); err != nil {
					return obs, acted, err
				}
				acted = true
			}
		case cur.state == runtimeapi.ContainerState_CONTAINER_EXITED:
			if w.specChanged[c.Name] || shouldRestart(pod.Spec.RestartPolicy, cur.exitCode) {
				acted = w.restart(ctx, pod, c, false, cur, obs, env) || acted
			}
		}
	}
	return obs, acted, nil
}

// startEnv is what starting a container in the current sandbox needs.
type startEnv struct {
	sandboxID string
	sandbox   *runtimeapi.PodSandboxConfig
	volumes   map[string]volume
	ips       podIPs
}

// volumesFailed: as kubelet, the pod's containers wait in
// ContainerCreating, and a FailedMount event names the volume.
func (w *podWorker) volumesFailed(pod *v1.Pod, err error) {
	w.waitAll(pod, reasonContainerCreating, err.Error())
	msg := err.Error()
	var ve *volumeError
	if errors.As(err, &ve) {
		msg = ve.eventMessage()
	}
	klog.ErrorS(err, "Cannot set up the pod's volumes; will retry", "pod", klog.KObj(pod))
	w.p.podEvent(pod, true, eventFailedMount, msg)
}

func (w *podWorker) waitAll(pod *v1.Pod, reason, msg string) {
	for _, c := range pod.Spec.InitContainers {
		w.waiting[c.Name] = &waiting{reason: reason, message: msg}
	}
	for _, c := range pod.Spec.Containers {
		w.waiting[c.Name] = &waiting{reason: reason, message: msg}
	}
}

// runSandbox stops what is left of the pod's last sandbox and makes the
// next one.
func (w *podWorker) runSandbox(ctx context.Context, obs *observation) error {
	pod := w.pod()
	key := "sandbox/" + string(pod.UID)
	if ok, wait := w.p.backoff.retryReady(key); !ok {
		w.wakeAfter(wait)
		return nil
	}
	attempt := uint32(0)
	if len(obs.sandboxes) > 0 {
		attempt = obs.sandboxes[0].GetMetadata().GetAttempt() + 1
		for _, sb := range obs.sandboxes {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				if err := w.p.rt.StopPodSandbox(ctx, sb.Id); err != nil && !isNotFound(err) {
					return fmt.Errorf("stop sandbox %s: %w", sb.Id, err)
				}
			}
		}
	}
	if _, err := setUpVolumes(podDir(w.p.cfg.StateDir, pod.UID), pod, w.p.objects, w.p.mem); err != nil {
		w.volumesFailed(pod, err)
		w.p.backoff.failed(key, w.p.clock.Now())
		w.wakeAfter(backoffInitial)
		return nil
	}
	cfg, err := w.p.makeSandboxConfig(pod, attempt)
	if err != nil {
		w.waitAll(pod, reasonContainerCreating, err.Error())
		return nil
	}
	if err := os.MkdirAll(cfg.LogDirectory, privateDirPerm); err != nil {
		return err
	}
	runtimeHandler, err := w.p.runtimeHandler(ctx, pod)
	var id string
	if err == nil {
		if runtimeHandler != "" {
			klog.V(2).InfoS("Running pod with runtime handler", "pod", klog.KObj(pod), "runtimeHandler", runtimeHandler)
		}
		id, err = w.p.rt.RunPodSandbox(ctx, cfg, runtimeHandler)
	}
	if err != nil {
		// As kubelet: the pod waits (a missing RuntimeClass may yet be
		// made), with an event, and is tried again with back-off.
		msg := fmt.Sprintf("Failed to create pod sandbox: %v", err)
		klog.ErrorS(err, "Creating the pod's sandbox; will retry", "pod", klog.KObj(pod))
		w.waitAll(pod, reasonContainerCreating, msg)
		w.p.podEvent(pod, true, eventFailedCreatePodSandBox, msg)
		w.p.backoff.failed(key, w.p.clock.Now())
		w.wakeAfter(backoffInitial)
		return nil
	}
	w.p.backoff.reset(key)
	for k := range w.waiting {
		delete(w.waiting, k)
	}
	klog.V(2).InfoS("Sandbox running", "pod", klog.KObj(pod), "sandbox", id, "attempt", attempt)
	return nil
}

// restart starts again container c, which exited, once its back-off
// allows; it reports whether it did.
func (w *podWorker) restart(ctx context.Context, pod *v1.Pod, c *v1.Container, init bool, cur *criContainer, obs *observation, env startEnv) bool {
	key := "crash/" + string(pod.UID) + "/" + c.Name
	finished := cur.finishedAt
	if finished.IsZero() {
		finished = cur.createdAt
	}
	if w.specChanged[c.Name] {
		delete(w.specChanged, c.Name)
	} else {
		if ok, wait := w.p.backoff.ready(key, finished); !ok {
			w.waiting[c.Name] = &waiting{reason: reasonCrashLoopBackOff,
				message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
					w.p.backoff.b.Get(key), c.Name, pod.Name, pod.Namespace, pod.UID)}
			w.wakeAfter(wait)
			return false
		}
		w.p.backoff.restarted(key, finished)
	}
	return w.start(ctx, pod, c, init, obs.nextAttempt(c.Name), env)
}

// start pulls c's image, creates and starts the container; failures are
// kept as the container's waiting reason. It reports whether it made a
// container.
func (w *podWorker) start(ctx context.Context, pod *v1.Pod, c *v1.Container, init bool, attempt uint32, env startEnv) bool {
	imageRef, wr := w.ensureImage(ctx, c, env.sandbox)
	if wr != nil {
		w.waiting[c.Name] = wr
		if wr.reason != reasonImagePullBackOff {
			w.wakeAfter(backoffInitial)
		}
		return false
	}
	cfgKey := "config/" + string(pod.UID) + "/" + c.Name
	vars, err := makeEnv(pod, c, env.ips, w.p.objects, env.volumes)
	if err == nil {
		err = w.verifyNonRoot(ctx, pod, c)
	}
	var cfg *runtimeapi.ContainerConfig
	if err == nil {
		termFile := ""
		if c.TerminationMessagePath != "" {
			termFile = w.terminationFile(c.Name, attempt)
			if err = os.MkdirAll(filepath.Dir(termFile), privateDirPerm); err == nil {
				err = os.WriteFile(termFile, nil, 0o666)
			}
		}
		if err == nil {
			cfg, err = makeContainerConfig(pod, startSpec{c: c, init: init, attempt: attempt, imageRef: imageRef,
				env: vars, volumes: env.volumes, termFile: termFile})
		}
	}
	if err != nil {
		w.waiting[c.Name] = &waiting{reason: reasonCreateConfigError, message: err.Error()}
		w.p.containerEvent(pod, c.Name, true, eventFailed, "Error: "+err.Error())
		w.p.backoff.failed(cfgKey, w.p.clock.Now())
		_, wait := w.p.backoff.retryReady(cfgKey)
		w.wakeAfter(max(wait, time.Second))
		return false
	}
	cfg.Labels[labelNode] = w.p.cfg.NodeName
	id, err := w.p.rt.CreateContainer(ctx, env.sandboxID, cfg, env.sandbox)
	if err != nil {
		w.waiting[c.Name] = &waiting{reason: reasonCreateContainerError, message: err.Error()}
		w.wakeAfter(backoffInitial)
		return false
	}
	w.p.backoff.reset(cfgKey)
	if err := w.p.rt.StartContainer(ctx, id); err != nil {
		// Left created or exited: the next pass restarts it with back-off.
		w.waiting[c.Name] = &waiting{reason: reasonRunContainerError, message: err.Error()}
		return true
	}
	delete(w.waiting, c.Name)
	klog.V(2).InfoS("Container started", "pod", klog.KObj(pod), "container", c.Name, "id", id, "attempt", attempt)
	w.postStart(ctx, pod, c, id)
	return true
}

// startCreated starts a container that was created but not started (a
// start that failed, or vk-cri stopped in between).
func (w *podWorker) startCreated(ctx context.Context, pod *v1.Pod, cur *criContainer) bool {
	if err := w.p.rt.StartContainer(ctx, cur.id); err != nil {
		w.waiting[cur.name] = &waiting{reason: reasonRunContainerError, message: err.Error()}
		// Remove it: the next pass makes a new one, with back-off.
		_ = w.p.rt.RemoveContainer(ctx, cur.id)
		w.wakeAfter(backoffInitial)
		return false
	}
	delete(w.waiting, cur.name)
	w.postStart(ctx, pod, specOf(pod, cur.name), cur.id)
	return true
}

// stopContainer stops running container id of spec c, its preStop hook
// first, within the pod's grace period.
func (w *podWorker) stopContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) error {
	return w.killContainer(ctx, pod, c, id, podGrace(pod), "", nil)
}

// probeFailed reports whether container instance id failed its liveness
// or startup probe and is to be killed.
func (w *podWorker) probeFailed(id string) bool {
	_, failed := w.probes.failed(id)
	return failed
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
			}
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

// kill stops the pod's containers, giving each grace seconds after
// SIGTERM, then stops and removes its sandboxes and its files. It returns
// what the containers looked like once stopped, for the final status.
func (w *podWorker) kill(ctx context.Context, grace int64) (*observation, error) {
	pod := w.pod()
	obs, err := w.observe(ctx)
	if err != nil {
		return nil, err
	}
	if err := w.stopContainers(ctx, pod, obs.notExited(), grace); err != nil {
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
	for _, prefix := range []string{"crash/", "config/"} {
		for _, c := range append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			w.p.backoff.reset(prefix + string(pod.UID) + "/" + c.Name)
		}
	}
	w.p.backoff.reset("sandbox/" + string(pod.UID))
	return obs, nil
}
