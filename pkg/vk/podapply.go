package vk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// syncStep is the step of bringing a container up that a result is about.
type syncStep int

const (
	stepOK        syncStep = iota // it started (or, an init container, is done): nothing holds it back
	stepSandbox                   // the pod's sandbox or volumes could not be made
	stepBackOff                   // it exited and waits for its back-off
	stepImage                     // its image: the reason is the image's own (images.go)
	stepConfig                    // its config: env, files, runAsNonRoot
	stepCreate                    // CreateContainer
	stepStart                     // StartContainer
	stepPostStart                 // its postStart hook
)

// containerResult is what the last action did for one container, as
// kubelet's SyncResult.
type containerResult struct {
	name    string
	step    syncStep
	reason  string // stepImage: the reason images.go named
	message string
}

// waiting is the reason and message a result leaves the container
// waiting with; nil when nothing holds it back.
func (r containerResult) waiting() *waiting {
	var reason string
	switch r.step {
	case stepOK:
		return nil
	case stepSandbox:
		reason = reasonContainerCreating
	case stepBackOff:
		reason = reasonCrashLoopBackOff
	case stepImage:
		reason = r.reason
	case stepConfig:
		reason = reasonCreateConfigError
	case stepCreate:
		reason = reasonCreateContainerError
	case stepStart:
		reason = reasonRunContainerError
	case stepPostStart:
		reason = reasonPostStartHookError
	}
	return &waiting{reason: reason, message: r.message}
}

// record is the one place the containers' waiting reasons are set, from
// the results of what was last done to them (kubelet's reason cache).
func (w *podWorker) record(results []containerResult) {
	for _, r := range results {
		if wt := r.waiting(); wt != nil {
			w.waiting[r.name] = wt
		} else {
			delete(w.waiting, r.name)
		}
	}
}

// allContainers is the same result for each of the pod's containers.
func allContainers(pod *v1.Pod, step syncStep, msg string) []containerResult {
	out := make([]containerResult, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			out = append(out, containerResult{name: c.Name, step: step, message: msg})
		}
	}
	return out
}

// startEnv is what starting a container in the current sandbox needs.
type startEnv struct {
	sandboxID string
	sandbox   *runtimeapi.PodSandboxConfig
	volumes   map[string]volume
	ips       podIPs
	// pidTarget is, for one ephemeral container, the container whose PID
	// namespace it joins (ephemeral.go).
	pidTarget string
}

// applyPodActions carries out plan, made for pod as obs shows it. results
// say what it did to each container it tried, error or not (record turns
// them into waiting reasons); acted tells that it changed something in
// the runtime, so that the state is worth reading again.
func (w *podWorker) applyPodActions(ctx context.Context, pod *v1.Pod, obs *observation, plan podActions) (results []containerResult, acted bool, err error) {
	switch {
	case plan.killPod:
		// Deleted while this pass ran: the next pass kills the pod.
		return results, false, nil
	case len(plan.stop) > 0:
		klog.V(2).InfoS("Pod finished; stopping its remaining containers", "pod", klog.KObj(pod), "containers", len(plan.stop))
		if err := w.stopContainers(ctx, pod, plan.stop, podGrace(pod)); err != nil {
			return results, false, err
		}
		return results, true, nil
	case plan.stopSandbox != "":
		klog.V(2).InfoS("Pod finished; stopping its sandbox", "pod", klog.KObj(pod))
		if err := w.p.rt.StopPodSandbox(ctx, plan.stopSandbox); err != nil && !isNotFound(err) {
			return results, false, fmt.Errorf("stop sandbox %s: %w", plan.stopSandbox, err)
		}
		return results, true, nil
	case plan.sandboxHeld:
		w.wakeAfter(plan.sandboxWait)
		return results, false, nil
	case plan.createSandbox:
		results, err = w.runSandbox(ctx, pod, plan)
		return results, err == nil, err
	}

	var env startEnv
	if plan.syncContainers {
		var res []containerResult
		if env, res, err = w.containerEnv(pod, obs); err != nil || res != nil {
			results = res
			return results, false, err
		}
	}
	if plan.terminal {
		if w.advance(podTerminal) {
			klog.V(2).InfoS("Pod finished", "pod", klog.KObj(pod))
		}
		return results, plan.recheck, nil
	}
	for _, a := range plan.containers {
		did, res, err := w.applyContainer(ctx, pod, a, env)
		if res != nil {
			results = append(results, *res)
		}
		acted = acted || did
		if err != nil {
			return results, acted, err
		}
		if a.recheck && did {
			return results, true, nil // look again before the rest
		}
	}
	return results, acted, nil
}

// containerEnv sets up the pod's volumes and what its containers start
// with in the current sandbox. When the volumes fail, the containers wait
// (results) and the worker tries again later.
func (w *podWorker) containerEnv(pod *v1.Pod, obs *observation) (startEnv, []containerResult, error) {
	vols, err := setUpVolumes(podDir(w.p.cfg.StateDir, pod.UID), pod, w.p.objects, w.p.mem)
	if err != nil {
		w.wakeAfter(backoffInitial)
		return startEnv{}, w.volumesFailed(pod, err), nil
	}
	sbCfg, err := w.p.makeSandboxConfig(pod, obs.sandboxes[0].GetMetadata().GetAttempt())
	if err != nil {
		return startEnv{}, nil, err
	}
	sb := obs.sandboxInfo()
	env := startEnv{sandboxID: sb.id, sandbox: sbCfg, volumes: vols, ips: podIPs{podIPs: sb.ips, hostIPs: w.p.cfg.NodeIPs}}
	if pod.Spec.HostNetwork {
		env.ips.podIPs = w.p.cfg.NodeIPs
	}
	return env, nil, nil
}

// applyContainer carries out one container's action; did tells that it
// changed something in the runtime, res what it leaves the container with
// (nil: no change).
func (w *podWorker) applyContainer(ctx context.Context, pod *v1.Pod, a containerAction, env startEnv) (did bool, res *containerResult, err error) {
	c := a.c
	switch a.kind {
	case actionStart:
		env.pidTarget = a.target
		did, r := w.start(ctx, pod, c, a.init, a.attempt, env)
		return did, &r, nil
	case actionNoTarget:
		w.p.containerEvent(pod, c.Name, true, eventFailed, "Error: "+a.message)
		return false, &containerResult{name: c.Name, step: stepConfig, message: a.message}, nil
	case actionStartCreated:
		did, r := w.startCreated(ctx, pod, a.cur)
		return did, &r, nil
	case actionRestart:
		if a.specChanged {
			delete(w.specChanged, c.Name)
		} else {
			w.p.backoff.restarted(crashKey(pod, c.Name), a.failedAt)
		}
		did, r := w.start(ctx, pod, c, a.init, a.attempt, env)
		return did, &r, nil
	case actionBackOff:
		w.wakeAfter(a.wait)
		return false, &containerResult{name: c.Name, step: stepBackOff, message: a.message}, nil
	case actionDone:
		return false, &containerResult{name: c.Name, step: stepOK}, nil
	case actionResize:
		return w.resizeContainer(ctx, pod, a), nil, nil
	case actionKill:
		what := "Container"
		if a.init && isSidecar(c) {
			what = "Sidecar"
		}
		if a.kill == killSpecChanged {
			klog.InfoS(what+" spec changed; restarting it", "pod", klog.KObj(pod), "container", c.Name)
			w.specChanged[c.Name] = true
		} else {
			klog.InfoS(what+" failed its probe; killing it", "pod", klog.KObj(pod), "container", c.Name, "probe", a.probe)
		}
		if err := w.killContainer(ctx, pod, c, a.cur.id, a.grace, a.message, nil); err != nil {
			return false, nil, err
		}
		return true, nil, nil
	}
	return false, nil, fmt.Errorf("unknown action %d for container %s", a.kind, c.Name)
}

// volumesFailed: as kubelet, the pod's containers wait in
// ContainerCreating, and a FailedMount event names the volume.
func (w *podWorker) volumesFailed(pod *v1.Pod, err error) []containerResult {
	msg := err.Error()
	var ve *volumeError
	if errors.As(err, &ve) {
		msg = ve.eventMessage()
	}
	klog.ErrorS(err, "Cannot set up the pod's volumes; will retry", "pod", klog.KObj(pod))
	w.p.podEvent(pod, true, eventFailedMount, msg)
	return allContainers(pod, stepSandbox, err.Error())
}

// runSandbox stops what is left of the pod's last sandbox and makes the
// next one; the results are what the pod's containers wait for.
func (w *podWorker) runSandbox(ctx context.Context, pod *v1.Pod, plan podActions) ([]containerResult, error) {
	key := sandboxKey(pod)
	for _, id := range plan.killSandboxes {
		if err := w.p.rt.StopPodSandbox(ctx, id); err != nil && !isNotFound(err) {
			return nil, fmt.Errorf("stop sandbox %s: %w", id, err)
		}
	}
	w.p.objectEvents(pod, volumeObjectEvents(pod, w.p.objects))
	if _, err := setUpVolumes(podDir(w.p.cfg.StateDir, pod.UID), pod, w.p.objects, w.p.mem); err != nil {
		res := w.volumesFailed(pod, err)
		w.p.backoff.failed(key, w.p.clock.Now())
		w.wakeAfter(backoffInitial)
		return res, nil
	}
	attempt := plan.sandboxAttempt
	cfg, err := w.p.makeSandboxConfig(pod, attempt)
	if err != nil {
		return allContainers(pod, stepSandbox, err.Error()), nil
	}
	if err := os.MkdirAll(cfg.LogDirectory, privateDirPerm); err != nil {
		return nil, err
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
		w.p.podEvent(pod, true, eventFailedCreatePodSandBox, msg)
		w.p.backoff.failed(key, w.p.clock.Now())
		w.wakeAfter(backoffInitial)
		return allContainers(pod, stepSandbox, msg), nil
	}
	w.p.backoff.reset(key)
	klog.V(2).InfoS("Sandbox running", "pod", klog.KObj(pod), "sandbox", id, "attempt", attempt)
	return allContainers(pod, stepOK, ""), nil
}

// start pulls c's image, creates and starts the container. It reports
// whether it made a container, and the result for c.
func (w *podWorker) start(ctx context.Context, pod *v1.Pod, c *v1.Container, init bool, attempt uint32, env startEnv) (bool, containerResult) {
	imageRef, wr := w.ensureImage(ctx, c, env.sandbox)
	if wr != nil {
		if wr.reason != reasonImagePullBackOff {
			w.wakeAfter(backoffInitial)
		}
		return false, containerResult{name: c.Name, step: stepImage, reason: wr.reason, message: wr.message}
	}
	cfgKey := configKey(pod, c.Name)
	w.p.objectEvents(pod, envObjectEvents(pod, c, w.p.objects))
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
				err = writeTerminationFile(termFile)
			}
		}
		hostsFile := ""
		// As kubelet: only once the pod has an address (or the node's).
		if err == nil && len(env.ips.podIPs) > 0 && !mountsEtcHosts(c) {
			hostsFile, err = writeHostsFile(podDir(w.p.cfg.StateDir, pod.UID), pod, env.ips.podIPs, w.p.cfg.DNS.domain())
		}
		if err == nil {
			cfg, err = makeContainerConfig(pod, startSpec{c: c, init: init, attempt: attempt, imageRef: imageRef,
				env: vars, volumes: env.volumes, termFile: termFile, pidTarget: env.pidTarget, hostsFile: hostsFile,
				oomScoreAdj: oomScoreAdj(pod, c, w.p.memCapacity.Load())})
		}
	}
	if err != nil {
		w.p.containerEvent(pod, c.Name, true, eventFailed, "Error: "+err.Error())
		w.p.backoff.failed(cfgKey, w.p.clock.Now())
		_, wait := w.p.backoff.retryReady(cfgKey)
		w.wakeAfter(max(wait, time.Second))
		return false, containerResult{name: c.Name, step: stepConfig, message: err.Error()}
	}
	cfg.Labels[labelNode] = w.p.cfg.NodeName
	id, err := w.p.rt.CreateContainer(ctx, env.sandboxID, cfg, env.sandbox)
	if err != nil {
		w.p.containerEvent(pod, c.Name, true, eventFailed, "Error: "+grpcMessage(err))
		w.wakeAfter(backoffInitial)
		return false, containerResult{name: c.Name, step: stepCreate, message: err.Error()}
	}
	w.p.containerEvent(pod, c.Name, false, eventCreated, "Container created")
	w.p.backoff.reset(cfgKey)
	if err := w.p.rt.StartContainer(ctx, id); err != nil {
		w.p.containerEvent(pod, c.Name, true, eventFailed, "Error: "+grpcMessage(err))
		// Left created or exited: the next pass restarts it with back-off.
		return true, containerResult{name: c.Name, step: stepStart, message: err.Error()}
	}
	w.p.containerEvent(pod, c.Name, false, eventStarted, "Container started")
	klog.V(2).InfoS("Container started", "pod", klog.KObj(pod), "container", c.Name, "id", id, "attempt", attempt)
	return true, w.postStart(ctx, pod, c, id)
}

// grpcMessage is the message of a runtime's gRPC error, as kubelet puts it
// in its events (without the code's prefix).
func grpcMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Message()
	}
	return err.Error()
}

// startCreated starts a container that was created but not started (a
// start that failed, or vk-cri stopped in between).
func (w *podWorker) startCreated(ctx context.Context, pod *v1.Pod, cur *criContainer) (bool, containerResult) {
	if err := w.p.rt.StartContainer(ctx, cur.id); err != nil {
		w.p.containerEvent(pod, cur.name, true, eventFailed, "Error: "+grpcMessage(err))
		// Remove it: the next pass makes a new one, with back-off.
		_ = w.p.rt.RemoveContainer(ctx, cur.id)
		w.wakeAfter(backoffInitial)
		return false, containerResult{name: cur.name, step: stepStart, message: err.Error()}
	}
	w.p.containerEvent(pod, cur.name, false, eventStarted, "Container started")
	res := w.postStart(ctx, pod, specOf(pod, cur.name), cur.id)
	res.name = cur.name
	return true, res
}
