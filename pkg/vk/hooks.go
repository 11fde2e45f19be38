package vk

import (
	"bytes"
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/cri-client/pkg/logs"
	"k8s.io/klog/v2"
)

// What kubelet does around a container's start and end besides CRI's
// create/start/stop: lifecycle hooks (kuberuntime's handlers: postStart
// right after StartContainer, preStop before StopContainer within the
// grace period), the events it records, and the termination message taken
// from the log.

const (
	reasonPostStartHookError = "PostStartHookError"
	eventFailedPostStartHook = "FailedPostStartHook"
	eventFailedPreStopHook   = "FailedPreStopHook"
	eventKilling             = "Killing"
	// minGraceSeconds is what StopContainer gets at least after a
	// preStop hook used up the grace period (kubelet's
	// minimumGracePeriodInSeconds).
	minGraceSeconds = 2
	// The termination message from the log (FallbackToLogsOnError): its
	// last lines, at most this many bytes of them, as kubelet.
	fallbackLogLines = 80
	fallbackLogBytes = 2048
)

// newEventRecorder records events as kubelet does (source "kubelet" on the
// node); stop flushes and stops it. With no client, events are dropped.
func newEventRecorder(client kubernetes.Interface, node string) (record.EventRecorder, func()) {
	if client == nil {
		return nil, func() {}
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: node}), b.Shutdown
}

// containerEvent records an event about a pod's container, named by its
// field path as kubelet does (spec.initContainers{...} for init
// containers and sidecars, spec.ephemeralContainers{...}).
func (p *Provider) containerEvent(pod *v1.Pod, container string, warn bool, reason, msg string) {
	field := "containers"
	if isInitContainer(pod, container) {
		field = "initContainers"
	}
	if ephemeralSpec(pod, container) != nil {
		field = "ephemeralContainers"
	}
	p.event(pod, fmt.Sprintf("spec.%s{%s}", field, container), warn, reason, msg)
}

// podEvent records an event about a pod as a whole.
func (p *Provider) podEvent(pod *v1.Pod, warn bool, reason, msg string) {
	p.event(pod, "", warn, reason, msg)
}

func (p *Provider) event(pod *v1.Pod, fieldPath string, warn bool, reason, msg string) {
	if p.recorder == nil {
		return
	}
	typ := v1.EventTypeNormal
	if warn {
		typ = v1.EventTypeWarning
	}
	ref := &v1.ObjectReference{
		Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion, FieldPath: fieldPath,
	}
	p.recorder.Event(ref, typ, reason, msg)
}

// isInitContainer says whether the pod's container named name is one of
// its init containers (a sidecar included).
func isInitContainer(pod *v1.Pod, name string) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return true
		}
	}
	return false
}

// specOf is the pod's container named name, nil if none.
func specOf(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return ephemeralSpec(pod, name)
}

// podHost is where a hook's httpGet goes when it names no host: the pod's
// IP as last reported, or the node's for hostNetwork.
func (w *podWorker) podHost(pod *v1.Pod) string {
	if pod.Spec.HostNetwork && len(w.p.cfg.NodeIPs) > 0 {
		return w.p.cfg.NodeIPs[0]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status != nil {
		return w.status.PodIP
	}
	return ""
}

// runHook runs a lifecycle handler in (or against) container id until ctx
// ends; it returns the handler's output, for the waiting message.
func (w *podWorker) runHook(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, h *v1.LifecycleHandler) (string, error) {
	switch {
	case h.Exec != nil:
		var timeout time.Duration // none but ctx's, as kubelet's postStart
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(time.Until(dl).Round(time.Second), time.Second)
		}
		stdout, stderr, err := w.p.rt.ExecSync(ctx, id, h.Exec.Command, timeout)
		out := string(append(stdout, stderr...))
		if err != nil {
			return out, fmt.Errorf("exec %q: %w", h.Exec.Command, err)
		}
		return out, nil
	case h.HTTPGet != nil:
		// As kubelet: only a request that fails counts, not the status.
		_, _, err := w.p.runner.httpGet(ctx, h.HTTPGet, &probeTarget{pod: pod, c: c, id: id, host: w.podHost(pod)})
		if err != nil {
			return "", fmt.Errorf("http get: %w", err)
		}
		return "", nil
	case h.Sleep != nil:
		t := w.p.clock.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C():
		}
		return "", nil
	}
	return "", fmt.Errorf("lifecycle handler of container %s has no action", c.Name)
}

// postStart runs c's postStart hook in container id, just started, and
// returns the result for c. When the hook fails, the container is killed
// and waits with PostStartHookError, to be restarted per restartPolicy.
func (w *podWorker) postStart(ctx context.Context, pod *v1.Pod, c *v1.Container, id string) containerResult {
	if c == nil || c.Lifecycle == nil || c.Lifecycle.PostStart == nil {
		res := containerResult{step: stepOK}
		if c != nil {
			res.name = c.Name
		}
		return res
	}
	out, err := w.runHook(ctx, pod, c, id, c.Lifecycle.PostStart)
	if err == nil {
		return containerResult{name: c.Name, step: stepOK}
	}
	klog.ErrorS(err, "PostStart hook failed; killing the container", "pod", klog.KObj(pod), "container", c.Name, "id", id)
	// The hook's output stays out of the event, which others may read
	// (kubelet's choice too).
	w.p.containerEvent(pod, c.Name, true, eventFailedPostStartHook, "PostStartHook failed")
	if kerr := w.killContainer(ctx, pod, c, id, podGrace(pod), "", nil); kerr != nil {
		klog.ErrorS(kerr, "Killing a container whose postStart hook failed", "pod", klog.KObj(pod), "container", c.Name)
	}
	msg := out
	if msg == "" {
		msg = err.Error()
	}
	return containerResult{name: c.Name, step: stepPostStart, message: msg}
}

// killContainer stops running container id of spec c (nil: unknown) with
// grace seconds in all: its preStop hook first, then, with order, its
// turn (a sidecar's at pod termination), then StopContainer with what is
// left (at least minGraceSeconds). msg, when set, is why (a Killing
// event, and the message of its terminated state).
func (w *podWorker) killContainer(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, grace int64, msg string, order *termOrder) error {
	name := ""
	if c != nil {
		name = c.Name
	}
	if msg != "" {
		w.mu.Lock()
		w.killMsgs[id] = msg
		w.mu.Unlock()
		w.p.containerEvent(pod, name, false, eventKilling, msg)
	}
	start, waited := w.p.clock.Now(), false
	if c != nil && c.Lifecycle != nil && c.Lifecycle.PreStop != nil && grace > 0 {
		hctx, cancel := context.WithTimeout(ctx, time.Duration(grace)*time.Second)
		out, err := w.runHook(hctx, pod, c, id, c.Lifecycle.PreStop)
		cancel()
		if err != nil && ctx.Err() == nil {
			klog.V(2).InfoS("PreStop hook failed", "pod", klog.KObj(pod), "container", name, "err", err, "output", out)
			w.p.containerEvent(pod, name, true, eventFailedPreStopHook, fmt.Sprintf("PreStopHook failed: %v", err))
		}
		waited = true
	}
	if left := time.Duration(grace)*time.Second - w.p.clock.Since(start); order != nil && left > 0 {
		if order.waitTurn(ctx, id, left) > 0 {
			klog.V(3).InfoS("Sidecar's turn to stop", "pod", klog.KObj(pod), "container", name, "id", id)
			waited = true
		}
	}
	if waited {
		grace = max(grace-int64(w.p.clock.Since(start).Seconds()), minGraceSeconds)
	}
	if err := w.p.rt.StopContainer(ctx, id, grace); err != nil && !isNotFound(err) {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	return nil
}

// killMessage is why vk-cri killed container id, if it did.
func (w *podWorker) killMessage(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killMsgs[id]
}

// forgetKills drops the kill messages of containers no longer seen.
func (w *podWorker) forgetKills(obs *observation) {
	seen := map[string]bool{}
	for _, l := range obs.containers {
		for _, c := range l {
			seen[c.id] = true
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.killMsgs {
		if !seen[id] {
			delete(w.killMsgs, id)
		}
	}
}

// logTail is the end of a container's CRI log (the last fallbackLogLines
// lines, at most fallbackLogBytes of them), for terminationMessagePolicy
// FallbackToLogsOnError.
func (w *podWorker) logTail(c *criContainer) string {
	path := joinLogPath(w.p.podLogDir(w.pod()), c.logPath)
	if path == "" {
		return ""
	}
	n := int64(fallbackLogLines)
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := logs.ReadLogs(ctx, path, c.id, &logs.LogOptions{TailLines: &n}, w.p.rt.RuntimeService, &buf, &buf); err != nil {
		klog.V(2).InfoS("Reading the log for a termination message", "container", c.id, "path", path, "err", err)
	}
	b := buf.Bytes()
	if len(b) > fallbackLogBytes {
		b = b[len(b)-fallbackLogBytes:]
	}
	return string(b)
}
