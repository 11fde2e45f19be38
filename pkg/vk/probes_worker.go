package vk

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// probeResultHook is called with every probe result (kind "liveness",
// "readiness" or "startup"; result "success", "failure" or "unknown"): it
// counts them in vkcri_probe_results_total (metrics.go).
var probeResultHook = recordProbe

// probeWorker runs one probe of one container instance.
type probeWorker struct {
	set     *probeSet
	kind    probeKind
	spec    *v1.Probe
	t       *probeTarget
	trigger chan struct{}

	// Owned by run.
	last   probeResult
	streak int
	// onHold: the container failed its liveness or startup probe and is
	// being killed; probing it more only races with the kill.
	onHold bool
}

func (pw *probeWorker) poke() {
	select {
	case pw.trigger <- struct{}{}:
	default:
	}
}

func seconds(v, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

func (pw *probeWorker) run(ctx context.Context) {
	clk := pw.set.clock
	period := seconds(pw.spec.PeriodSeconds, 10)
	sleep := func(d time.Duration) bool {
		t := clk.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C():
			return true
		}
	}
	// As kubelet's prober: within a period of the node's start (a
	// restart finds every running container's probes due at once), each
	// probe first waits a random part of its period, so that they spread
	// over it instead of reaching the runtime together.
	if s := pw.set.started; !s.IsZero() && clk.Since(s) < period {
		if !sleep(pw.set.jitter(period)) {
			return
		}
	}
	// The first probe when the initial delay (from the container's start)
	// has passed, then one every period or when triggered.
	if d := pw.t.startedAt.Add(time.Duration(pw.spec.InitialDelaySeconds) * time.Second).Sub(clk.Now()); d > 0 && !sleep(d) {
		return
	}
	tick := clk.NewTicker(period)
	defer tick.Stop()
	for {
		pw.step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		case <-pw.trigger:
		}
	}
}

// step probes once, if the probe is due, and records the result once the
// success or failure threshold is reached (kubelet's worker.doProbe).
func (pw *probeWorker) step(ctx context.Context) {
	s, t := pw.set, pw.t
	if pw.onHold || ctx.Err() != nil || s.stopsWhenTerminating(pw.kind) {
		return
	}
	if s.clock.Since(t.startedAt) < time.Duration(pw.spec.InitialDelaySeconds)*time.Second {
		return
	}
	started := t.c.StartupProbe == nil || s.result(t.id, probeStartup) == resultSuccess
	if started == (pw.kind == probeStartup) {
		// A startup probe stops once the container started; the others
		// wait for it.
		return
	}
	timeout := seconds(pw.spec.TimeoutSeconds, 1)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	r, out, err := s.check(pctx, pw.kind, pw.spec, t)
	cancel()
	if ctx.Err() != nil || s.stopsWhenTerminating(pw.kind) {
		// The container went while probing, or its pod began
		// terminating (a liveness probe failing then may only see what
		// the container's SIGTERM handler did): nothing to say.
		return
	}
	if err != nil {
		probeResultHook(pw.kind.String(), resultUnknown.String())
		klog.V(2).InfoS("Probe errored", "probe", pw.kind, "pod", klog.KObj(t.pod), "container", t.c.Name, "err", err)
		return
	}
	if r == resultWarning {
		klog.V(3).InfoS("Probe succeeded with a warning", "probe", pw.kind, "pod", klog.KObj(t.pod), "container", t.c.Name, "output", out)
		if s.event != nil {
			s.event(t, true, "ProbeWarning", fmt.Sprintf("%s probe warning: %s", pw.kind.title(), out))
		}
		r = resultSuccess
	}
	probeResultHook(pw.kind.String(), r.String())
	if r == resultFailure {
		klog.V(2).InfoS("Probe failed", "probe", pw.kind, "pod", klog.KObj(t.pod), "container", t.c.Name, "output", out)
		if s.event != nil {
			s.event(t, true, "Unhealthy", fmt.Sprintf("%s probe failed: %s", pw.kind.title(), out))
		}
	}
	if r == pw.last {
		pw.streak++
	} else {
		pw.last, pw.streak = r, 1
	}
	failures, successes := int(pw.spec.FailureThreshold), int(pw.spec.SuccessThreshold)
	if failures <= 0 {
		failures = 3 // the API's defaults, for a pod that skipped defaulting
	}
	if r == resultFailure && pw.streak < failures || r == resultSuccess && pw.streak < max(successes, 1) {
		return
	}
	s.set(t.id, pw.kind, r)
	if r == resultFailure && pw.kind != probeReadiness {
		pw.onHold, pw.streak = true, 0
	}
}
