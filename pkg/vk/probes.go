package vk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	utilexec "k8s.io/utils/exec"
)

// Probes, as kubelet's prober runs them (k8s.io/kubernetes/pkg/kubelet/
// prober): one goroutine per probe per running container instance, keyed
// by container ID and stopped when that container goes. Results are kept
// here and read by computeStatus; a result that changes pokes the pod's
// worker, which kills a container that failed its liveness or startup
// probe.

type probeKind int

const (
	probeLiveness probeKind = iota
	probeReadiness
	probeStartup
)

func (k probeKind) String() string {
	switch k {
	case probeLiveness:
		return "liveness"
	case probeReadiness:
		return "readiness"
	}
	return "startup"
}

// title is the kind as kubelet's events spell it ("Liveness probe failed").
func (k probeKind) title() string {
	s := k.String()
	return strings.ToUpper(s[:1]) + s[1:]
}

type probeResult int

const (
	resultUnknown probeResult = iota // not probed yet, or the probe could not run
	resultSuccess
	resultFailure
)

func (r probeResult) String() string {
	switch r {
	case resultSuccess:
		return "success"
	case resultFailure:
		return "failure"
	}
	return "unknown"
}

// probeResultHook is called with every probe result (kind "liveness",
// "readiness" or "startup"; result "success", "failure" or "unknown"): it
// counts them in vkcri_probe_results_total (metrics.go).
var probeResultHook = recordProbe

// probeUserAgent is what kubelet sends (kube-probe/<major>.<minor>).
const probeUserAgent = "kube-probe/1.37"

// maxProbeOutput is how much of a probe's output is kept for its event, as
// kubelet's limit.
const maxProbeOutput = 10 * 1024

// probeTarget is the container instance a probe checks.
type probeTarget struct {
	pod       *v1.Pod
	c         *v1.Container
	id        string
	startedAt time.Time
	// host is where httpGet, tcpSocket and grpc probes connect when the
	// probe names no host: the pod's IP, or the node's for hostNetwork.
	host string
}

// probeFunc runs a probe once. An error means it could not run: its
// result is thrown away, as kubelet does.
type probeFunc func(ctx context.Context, kind probeKind, p *v1.Probe, t *probeTarget) (probeResult, string, error)

// containerProbes are the probes of one running container instance.
type containerProbes struct {
	name    string
	cancel  context.CancelFunc
	done    sync.WaitGroup
	results [3]probeResult
	workers []*probeWorker
}

// probeSet holds a pod's probes and their results.
type probeSet struct {
	clock    clock.WithTicker
	check    probeFunc
	onChange func()                                              // wakes the pod's worker
	event    func(t *probeTarget, warn bool, reason, msg string) // may be nil

	mu   sync.Mutex
	byID map[string]*containerProbes
}

func newProbeSet(clk clock.WithTicker, check probeFunc, onChange func()) *probeSet {
	return &probeSet{clock: clk, check: check, onChange: onChange, byID: map[string]*containerProbes{}}
}

func hasProbes(c *v1.Container) bool {
	return c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil
}

// ensure starts the probes of container instance t.id unless they run.
func (s *probeSet) ensure(ctx context.Context, t *probeTarget) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[t.id]; ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	cp := &containerProbes{name: t.c.Name, cancel: cancel}
	for kind, spec := range map[probeKind]*v1.Probe{probeLiveness: t.c.LivenessProbe, probeReadiness: t.c.ReadinessProbe, probeStartup: t.c.StartupProbe} {
		if spec == nil {
			continue
		}
		pw := &probeWorker{set: s, kind: kind, spec: spec, t: t, trigger: make(chan struct{}, 1)}
		cp.workers = append(cp.workers, pw)
		cp.done.Go(func() { pw.run(ctx) })
	}
	s.byID[t.id] = cp
	klog.V(3).InfoS("Probes started", "pod", klog.KObj(t.pod), "container", t.c.Name, "id", t.id, "probes", len(cp.workers))
}

// retain stops the probes of every container instance not in ids.
func (s *probeSet) retain(ids map[string]bool) {
	s.mu.Lock()
	var stop []*containerProbes
	for id, cp := range s.byID {
		if !ids[id] {
			stop = append(stop, cp)
			delete(s.byID, id)
		}
	}
	s.mu.Unlock()
	for _, cp := range stop {
		cp.cancel()
		cp.done.Wait()
	}
}

// stopAll stops every probe of the pod.
func (s *probeSet) stopAll() { s.retain(nil) }

// set records a probe's new result; a change wakes the pod's worker, and a
// startup probe's success runs the container's other probes at once.
func (s *probeSet) set(id string, kind probeKind, r probeResult) {
	s.mu.Lock()
	cp, ok := s.byID[id]
	changed := ok && cp.results[kind] != r
	if changed {
		cp.results[kind] = r
		if kind == probeStartup && r == resultSuccess {
			for _, pw := range cp.workers {
				pw.poke()
			}
		}
	}
	s.mu.Unlock()
	if changed && s.onChange != nil {
		s.onChange()
	}
}

func (s *probeSet) result(id string, kind probeKind) probeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cp, ok := s.byID[id]; ok {
		return cp.results[kind]
	}
	return resultUnknown
}

// state is whether running container c (instance id) has started and is
// ready, as kubelet's prober manager sets them: with no startup probe it
// has started once running; with no readiness probe it is ready once
// started; a probe that has not succeeded yet counts as not.
func (s *probeSet) state(c *v1.Container, id string) (started, ready bool) {
	started = c.StartupProbe == nil || s.result(id, probeStartup) == resultSuccess
	if !started {
		return false, false
	}
	return true, c.ReadinessProbe == nil || s.result(id, probeReadiness) == resultSuccess
}

// failed is the probe (liveness or startup) whose failure means container
// instance id must be killed, if any.
func (s *probeSet) failed(id string) (probeKind, bool) {
	for _, k := range []probeKind{probeStartup, probeLiveness} {
		if s.result(id, k) == resultFailure {
			return k, true
		}
	}
	return 0, false
}

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
	// The first probe when the initial delay (from the container's start)
	// has passed, then one every period or when triggered.
	if d := pw.t.startedAt.Add(time.Duration(pw.spec.InitialDelaySeconds) * time.Second).Sub(clk.Now()); d > 0 {
		t := clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
	tick := clk.NewTicker(seconds(pw.spec.PeriodSeconds, 10))
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
	if pw.onHold || ctx.Err() != nil {
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
	if ctx.Err() != nil {
		return // the container went while probing: nothing to say
	}
	if err != nil {
		probeResultHook(pw.kind.String(), resultUnknown.String())
		klog.V(2).InfoS("Probe errored", "probe", pw.kind, "pod", klog.KObj(t.pod), "container", t.c.Name, "err", err)
		return
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

// probeKillMessage is why container c, which failed its probe, is
// killed, as kubelet words it (a sidecar always restarts, unsaid).
func probeKillMessage(pod *v1.Pod, c *v1.Container, kind probeKind) string {
	if isSidecar(c) {
		return fmt.Sprintf("Init container %s failed %s probe", c.Name, kind)
	}
	msg := fmt.Sprintf("Container %s failed %s probe", c.Name, kind)
	if pod.Spec.RestartPolicy != v1.RestartPolicyNever {
		msg += ", will be restarted"
	}
	return msg
}

// probeGrace is the grace period of a kill for a failed probe: the probe's
// own terminationGracePeriodSeconds when set, else the pod's.
func probeGrace(pod *v1.Pod, p *v1.Probe) int64 {
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		return *p.TerminationGracePeriodSeconds
	}
	return podGrace(pod)
}

func podGrace(pod *v1.Pod) int64 {
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		return *pod.Spec.TerminationGracePeriodSeconds
	}
	return 30
}

// handlerRunner runs probe and hook actions against the runtime and the
// pod's network.
type handlerRunner struct {
	rt   *Runtime
	http *http.Client
}

func newHandlerRunner(rt *Runtime) *handlerRunner {
	tr := &http.Transport{
		// As kubelet: no keep-alive (each probe is its own connection),
		// no proxy, and HTTPS without verifying the container's
		// certificate.
		DisableKeepAlives: true,
		Proxy:             nil,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kubelet's probes do not verify either
	}
	return &handlerRunner{rt: rt, http: &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// Redirects are followed on the same host only; one to
			// another host ends the probe with the 3xx, a success.
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if req.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}}
}

// probe is the probeFunc over the real runtime and network.
func (h *handlerRunner) probe(ctx context.Context, kind probeKind, p *v1.Probe, t *probeTarget) (probeResult, string, error) {
	timeout := seconds(p.TimeoutSeconds, 1)
	switch {
	case p.Exec != nil:
		return h.exec(ctx, t.id, p.Exec.Command, timeout)
	case p.HTTPGet != nil:
		if _, err := resolvePort(p.HTTPGet.Port, t.c); err != nil {
			return resultUnknown, "", err // a spec error, not the container's
		}
		code, out, err := h.httpGet(ctx, p.HTTPGet, t)
		if err != nil {
			return resultFailure, err.Error(), nil
		}
		if code >= 200 && code < 400 {
			return resultSuccess, out, nil
		}
		return resultFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code), nil
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, t.c)
		if err != nil {
			return resultUnknown, "", err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = t.host
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return resultFailure, err.Error(), nil
		}
		conn.Close()
		return resultSuccess, "", nil
	case p.GRPC != nil:
		return h.grpc(ctx, p.GRPC, t, timeout)
	}
	return resultUnknown, "", fmt.Errorf("%s probe has no action", kind)
}

// exec runs cmd in the container with CRI ExecSync; a non-zero exit or a
// timeout is a failure.
func (h *handlerRunner) exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (probeResult, string, error) {
	stdout, stderr, err := h.rt.ExecSync(ctx, id, cmd, timeout)
	out := string(append(stdout, stderr...))
	if len(out) > maxProbeOutput {
		out = out[:maxProbeOutput]
	}
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return resultSuccess, out, nil
	case errors.As(err, &exit):
		if exit.ExitStatus() == 0 {
			return resultSuccess, out, nil
		}
		return resultFailure, out, nil
	case errors.Is(err, remote.ErrCommandTimedOut), status.Code(err) == codes.DeadlineExceeded, errors.Is(err, context.DeadlineExceeded):
		return resultFailure, fmt.Sprintf("command %q timed out", strings.Join(cmd, " ")), nil
	}
	return resultUnknown, "", err
}

// httpGet sends the GET of an httpGet probe or hook; it returns the status
// code and the start of the body.
func (h *handlerRunner) httpGet(ctx context.Context, a *v1.HTTPGetAction, t *probeTarget) (int, string, error) {
	port, err := resolvePort(a.Port, t.c)
	if err != nil {
		return 0, "", err
	}
	host := a.Host
	if host == "" {
		host = t.host
	}
	if host == "" {
		return 0, "", errors.New("the pod has no IP address yet")
	}
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u, err := url.Parse(a.Path)
	if err != nil {
		u = &url.URL{Path: a.Path}
	}
	u.Scheme, u.Host = scheme, net.JoinHostPort(host, strconv.Itoa(port))
	if u.Path == "" {
		u.Path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("User-Agent", probeUserAgent)
	req.Header.Set("Accept", "*/*")
	for _, hd := range a.HTTPHeaders {
		if strings.EqualFold(hd.Name, "Host") {
			req.Host = hd.Value
			continue
		}
		req.Header.Add(hd.Name, hd.Value)
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxProbeOutput))
	return resp.StatusCode, string(b), nil
}

// grpc calls grpc.health.v1.Health/Check; SERVING is a success.
func (h *handlerRunner) grpc(ctx context.Context, a *v1.GRPCAction, t *probeTarget, timeout time.Duration) (probeResult, string, error) {
	addr := net.JoinHostPort(t.host, strconv.Itoa(int(a.Port)))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent(probeUserAgent))
	if err != nil {
		return resultFailure, err.Error(), nil
	}
	defer conn.Close()
	svc := ""
	if a.Service != nil {
		svc = *a.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return resultFailure, fmt.Sprintf("this server does not implement the grpc health protocol (grpc.health.v1.Health): %v", err), nil
	case status.Code(err) == codes.DeadlineExceeded:
		return resultFailure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
	case err != nil:
		return resultFailure, fmt.Sprintf("error: health rpc probe failed: %v", err), nil
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return resultFailure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus()), nil
	}
	return resultSuccess, "", nil
}

// resolvePort is a probe's or hook's port: a number, or the name of one of
// the container's ports.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	port := -1
	if p.Type == intstr.Int {
		port = p.IntValue()
	} else {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port = int(cp.ContainerPort)
			}
		}
		if port < 0 {
			if n, err := strconv.Atoi(p.StrVal); err == nil {
				port = n
			} else {
				return 0, fmt.Errorf("no port named %q in container %s", p.StrVal, c.Name)
			}
		}
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port %d", port)
	}
	return port, nil
}

// syncProbes runs the probes of the pod's running app containers and
// sidecars (regular init containers have none) and stops those of
// containers that are gone or stopped.
func (w *podWorker) syncProbes(ctx context.Context, pod *v1.Pod, obs *observation) {
	keep := map[string]bool{}
	sb := obs.sandboxInfo()
	host := ""
	switch {
	case pod.Spec.HostNetwork && len(w.p.cfg.NodeIPs) > 0:
		host = w.p.cfg.NodeIPs[0]
	case sb != nil && len(sb.ips) > 0:
		host = sb.ips[0]
	}
	probed := make([]*v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			probed = append(probed, &pod.Spec.InitContainers[i])
		}
	}
	for i := range pod.Spec.Containers {
		probed = append(probed, &pod.Spec.Containers[i])
	}
	for _, c := range probed {
		cur := obs.current(c.Name)
		if !hasProbes(c) || cur == nil || cur.state != runtimeapi.ContainerState_CONTAINER_RUNNING || w.terminal {
			continue
		}
		keep[cur.id] = true
		startedAt := cur.startedAt
		if startedAt.IsZero() {
			startedAt = cur.createdAt
		}
		if now := w.p.clock.Now(); startedAt.After(now) {
			startedAt = now // the runtime's clock is ahead: wait no longer than asked
		}
		w.probes.ensure(ctx, &probeTarget{pod: pod, c: c, id: cur.id, startedAt: startedAt, host: host})
	}
	w.probes.retain(keep)
}
