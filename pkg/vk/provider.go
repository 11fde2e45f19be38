package vk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Config is what the provider needs to run pods on its node.
type Config struct {
	NodeName string
	// NodeIPs are the node's addresses (InternalIP), first the primary.
	NodeIPs []string
	// StateDir holds the pods' volume files and logs.
	StateDir string
	Runtime  *Runtime
	// Client reads the configMaps and secrets the node's pods reference,
	// one watch per object (volumes_watch.go), and what those watches
	// have not listed yet.
	Client kubernetes.Interface
	// Services gives the containers' service link variables (none when
	// nil).
	Services corev1listers.ServiceLister
	DNS      DNS
	// PodCIDR is the node's pod CIDR, comma-separated (one per family),
	// handed to the runtime when the Node's spec has none (podcidr.go).
	PodCIDR string
	// ResyncPeriod wakes every pod worker this often whatever the events
	// say (default 30 s).
	ResyncPeriod time.Duration
	// RelistPeriod is how often the runtime is listed when it has no
	// container events (default 1 s, kubelet's PLEG period).
	RelistPeriod time.Duration
	// Clock is for tests (default: the real one).
	Clock clock.WithTicker
	// AllowedUnsafeSysctls are kubelet's --allowed-unsafe-sysctls: the
	// sysctls and patterns (ending in "*") pods may set beyond the safe
	// set (admission.go).
	AllowedUnsafeSysctls []string
	// ContainerLogs is the containers' log rotation policy (logrotate.go;
	// zero MaxSize: no rotation).
	ContainerLogs LogRotation
}

// Provider is the virtual-kubelet provider: it runs the pods of its node
// through CRI, one worker per pod.
type Provider struct {
	cfg   Config
	rt    *Runtime
	clock clock.WithTicker
	// started is when the provider was made: probes of containers found
	// running spread over their period after it (probes_worker.go).
	started time.Time
	backoff *backoff
	objects objectSource
	// mem mounts the tmpfs of secret, projected and downwardAPI volumes
	// (volumes_memory.go).
	mem *memoryMedium
	// runtimeName prefixes container ids (cri-compose://<id>), from the
	// runtime's Version.
	runtimeName    string
	runtimeVersion string
	// runner runs probes and lifecycle hooks (probes_runner.go, hooks.go);
	// recorder records the events kubelet would (nil: none).
	runner     *handlerRunner
	recorder   record.EventRecorder
	stopEvents func()
	// runtimeClasses resolves pods' RuntimeClasses (runtimeclass.go; nil:
	// no API server, the default handler).
	runtimeClasses runtimeClassGetter
	// admission refuses the pods kubelet would (admission.go).
	admission *admitter
	// logs rotates the containers' logs (logrotate.go; nil: off).
	logs *logRotator

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	byName  map[string]types.UID // namespace/name → uid of the current pod
	// finished holds the last status of the pods whose workers stopped
	// and removed them, until the API server's object goes (a finalizer
	// can hold it): a later deletion of the same pod says that status
	// again rather than run a worker that finds nothing and reports the
	// containers as never started.
	finished map[types.UID]finishedPod
	notify   func(*v1.Pod)
	ctx      context.Context // the workers' context, from Run

	node    nodeState
	nodeCPU nodeCPU // last node CPU sample (stats.go)
	// runtimeDown: the node's Ready condition is False (the runtime is
	// unreachable or not ready); its pods are not Ready then (unseen.go).
	runtimeDown atomic.Bool
	// memCapacity is the node's memory capacity in bytes, which Burstable
	// containers' OOM score adjustments are reckoned against: the host's
	// until ConfigureNode reads the runtime's.
	memCapacity atomic.Int64
	// podLevel is whether, and if not why not, the runtime enforces
	// pod-level resources (podresources.go), as ConfigureNode read it.
	podLevel atomic.Pointer[podLevelSupport]
}

// New makes a provider; Run starts it.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.NodeName == "" || cfg.StateDir == "" || cfg.Runtime == nil {
		return nil, errors.New("vk: NodeName, StateDir and Runtime are required")
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 30 * time.Second
	}
	if cfg.RelistPeriod <= 0 {
		cfg.RelistPeriod = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	v, err := cfg.Runtime.Version(ctx, "v1")
	if err != nil {
		return nil, fmt.Errorf("CRI Version: %w", err)
	}
	p := &Provider{
		cfg: cfg, rt: cfg.Runtime, clock: cfg.Clock, started: cfg.Clock.Now(),
		backoff:        newBackoff(cfg.Clock, backoffInitial, backoffMax),
		mem:            &memoryMedium{},
		runtimeName:    v.GetRuntimeName(),
		runtimeVersion: v.GetRuntimeVersion(),
		workers:        map[types.UID]*podWorker{},
		byName:         map[string]types.UID{},
		finished:       map[types.UID]finishedPod{},
	}
	p.memCapacity.Store(memTotal())
	if p.admission, err = newHostAdmitter(cfg.AllowedUnsafeSysctls); err != nil {
		return nil, fmt.Errorf("allowed unsafe sysctls: %w", err)
	}
	if err := cfg.ContainerLogs.Validate(); err != nil {
		return nil, err
	}
	if cfg.ContainerLogs.MaxSize > 0 {
		p.logs = &logRotator{p: p, policy: cfg.ContainerLogs}
	}
	p.objects = newAPIObjects(cfg, p.objectChanged)
	p.runner = newHandlerRunner(cfg.Runtime)
	if cfg.Client != nil {
		p.runtimeClasses = apiRuntimeClasses(cfg.Client)
	}
	p.recorder, p.stopEvents = newEventRecorder(cfg.Client, cfg.NodeName)
	klog.InfoS("CRI runtime", "name", v.GetRuntimeName(), "version", v.GetRuntimeVersion(), "apiVersion", v.GetRuntimeApiVersion())
	return p, nil
}

// RuntimeName is the runtime's name from CRI Version.
func (p *Provider) RuntimeName() string { return p.runtimeName }

// Run drives the provider until ctx ends: the runtime's event stream,
// the periodic resync and the node's runtime conditions. Pod workers run
// under ctx too; when it ends they stop and the pods keep running, as
// they do when kubelet stops.
func (p *Provider) Run(ctx context.Context) {
	p.mu.Lock()
	p.ctx = ctx
	for _, w := range p.workers { // made before Run
		go w.run(ctx)
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.watchEvents(ctx) })
	wg.Go(func() { p.monitorRuntime(ctx) })
	wg.Go(func() { p.syncPodCIDR(ctx) })
	if p.logs != nil {
		wg.Go(func() { every(ctx, p.clock, p.logs.policy.MonitorInterval, func() { p.logs.rotateAll(ctx) }) })
	}
	wg.Go(func() {
		every(ctx, p.clock, orphanSweepPeriod, func() {
			p.backoff.gc()
			p.cleanOrphanedPodDirs(ctx) // volumes_cleanup.go
		})
	})
	wg.Wait()
	stopObjectWatches(p.objects)
	p.stopEvents()
}

// every runs f each period on clk until ctx ends.
func every(ctx context.Context, clk clock.WithTicker, period time.Duration, f func()) {
	t := clk.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			f()
		}
	}
}

// NotifyPods registers the callback that passes pod statuses to
// virtual-kubelet.
func (p *Provider) NotifyPods(_ context.Context, cb func(*v1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = cb
}

func (p *Provider) notifyPod(pod *v1.Pod) {
	p.mu.Lock()
	cb := p.notify
	p.mu.Unlock()
	if cb != nil {
		cb(pod)
	}
}

func key(namespace, name string) string { return namespace + "/" + name }

// CreatePod starts a worker for the pod.
func (p *Provider) CreatePod(_ context.Context, pod *v1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	registerObjects(p.objects, pod)
	if w, ok := p.workers[pod.UID]; ok {
		w.setPod(pod)
		return nil
	}
	w := newPodWorker(p, pod.DeepCopy())
	p.admitPod(w, pod)
	p.workers[pod.UID] = w
	p.byName[key(pod.Namespace, pod.Name)] = pod.UID
	if p.ctx != nil {
		go w.run(p.ctx)
	}
	klog.V(2).InfoS("Pod added", "pod", klog.KObj(pod), "uid", pod.UID)
	return nil
}

// UpdatePod passes the new spec to the pod's worker: a container whose
// spec changed (its image, say) is restarted.
func (p *Provider) UpdatePod(ctx context.Context, pod *v1.Pod) error {
	p.mu.Lock()
	w, ok := p.workers[pod.UID]
	p.mu.Unlock()
	if !ok {
		return p.CreatePod(ctx, pod)
	}
	registerObjects(p.objects, pod)
	w.setPod(pod)
	return nil
}

// PodStatusSeen passes the pod as the API server now has it to its
// worker, which takes the conditions that others set (podWorker.seeStatus).
// The controllers call it for every update their pod informer sees.
func (p *Provider) PodStatusSeen(pod *v1.Pod) {
	p.mu.Lock()
	w, ok := p.workers[pod.UID]
	p.mu.Unlock()
	if ok {
		w.seeStatus(pod)
	}
}

// DeletePod stops the pod gracefully and removes it from the runtime, in
// the background; its worker reports the final status when done. A pod
// vk-cri has no worker for (left from an earlier run) gets one that only
// removes it.
func (p *Provider) DeletePod(_ context.Context, pod *v1.Pod) error {
	grace := int64(30)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	p.mu.Lock()
	w, ok := p.workers[pod.UID]
	if f, done := p.finished[pod.UID]; !ok && done {
		p.mu.Unlock()
		// Stopped and removed already: its last status again, on the
		// object as it is now (the pod controller writes the whole object,
		// and the deletion's grace period may have changed since).
		np := pod.DeepCopy()
		np.Status = *f.status.DeepCopy()
		p.notifyPod(np)
		return nil
	}
	if !ok {
		w = newPodWorker(p, pod.DeepCopy())
		p.workers[pod.UID] = w
		if _, taken := p.byName[key(pod.Namespace, pod.Name)]; !taken {
			p.byName[key(pod.Namespace, pod.Name)] = pod.UID
		}
		if ctx := p.ctx; ctx != nil {
			defer func() { go w.run(ctx) }()
		}
	}
	p.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		w.setPod(pod)
	}
	w.delete(grace)
	klog.V(2).InfoS("Pod deletion requested", "pod", klog.KObj(pod), "uid", pod.UID, "grace", grace)
	return nil
}

// finishedPod is the last status of a pod vk-cri stopped and removed.
type finishedPod struct {
	status *v1.PodStatus
	at     time.Time
}

// finishedFor is how long a finished pod's status is kept when the API
// server's object is never seen to go (a watch that missed it).
const finishedFor = time.Hour

// rememberFinished keeps pod's last status (finished).
func (p *Provider) rememberFinished(uid types.UID, st *v1.PodStatus) {
	if st == nil {
		return
	}
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for u, f := range p.finished {
		if now.Sub(f.at) > finishedFor {
			delete(p.finished, u)
		}
	}
	p.finished[uid] = finishedPod{status: st.DeepCopy(), at: now}
}

// PodGone forgets a pod the API server no longer has. The controllers call
// it for every deletion their pod informer sees.
func (p *Provider) PodGone(pod *v1.Pod) {
	p.mu.Lock()
	delete(p.finished, pod.UID)
	p.mu.Unlock()
}

// writeFinalStatus writes pod's last status to the API server before its
// object is deleted, as kubelet's status manager does. The pod
// controller's own write of it comes later, from its queue; once the
// deletion's grace period changed, the API server refuses that write (the
// field is immutable, and the controller sends the whole object), and a
// finalizer holding the object would keep the pod's running status. A
// merge patch of the status alone, on this UID, has no such race.
func (p *Provider) writeFinalStatus(ctx context.Context, pod *v1.Pod, st *v1.PodStatus) {
	if p.cfg.Client == nil || st == nil {
		return
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": pod.UID}, // a precondition: not a new pod of the same name
		"status":   st,
	})
	if err == nil {
		_, err = p.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.ErrorS(err, "Writing the pod's last status", "pod", klog.KObj(pod))
	}
}

// deleteFromAPI deletes a pod vk-cri has stopped and removed, with no
// grace period left, as kubelet does; the UID precondition spares a new
// pod of the same name.
func (p *Provider) deleteFromAPI(ctx context.Context, pod *v1.Pod) {
	if p.cfg.Client == nil {
		return
	}
	zero := int64(0)
	err := p.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.ErrorS(err, "Deleting the pod from the API server", "pod", klog.KObj(pod))
	}
}

// forget drops a worker that finished.
func (p *Provider) forget(w *podWorker) {
	pod := w.pod()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.workers[pod.UID] == w {
		delete(p.workers, pod.UID)
		forgetTokens(p.objects, pod.UID)
		unregisterObjects(p.objects, pod.UID)
		// What it held of the node is free: a deferred resize may fit now.
		for _, o := range p.workers {
			o.retryDeferredResize()
		}
	}
	if p.byName[key(pod.Namespace, pod.Name)] == pod.UID {
		delete(p.byName, key(pod.Namespace, pod.Name))
		// A newer pod of the same name may still be running.
		for uid, o := range p.workers {
			op := o.pod()
			if op.Namespace == pod.Namespace && op.Name == pod.Name {
				p.byName[key(pod.Namespace, pod.Name)] = uid
			}
		}
	}
}

func (p *Provider) worker(namespace, name string) *podWorker {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid, ok := p.byName[key(namespace, name)]
	if !ok {
		return nil
	}
	return p.workers[uid]
}

// GetPod returns the pod with its latest status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*v1.Pod, error) {
	w := p.worker(namespace, name)
	if w == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not known", namespace, name)
	}
	return w.podWithStatus(), nil
}

// GetPodStatus returns the pod's latest status.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*v1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods returns the pods this node runs: those it has workers for and
// those the runtime still holds from an earlier run (by their sandboxes'
// labels), so that virtual-kubelet deletes the ones Kubernetes no longer
// has.
func (p *Provider) GetPods(ctx context.Context) ([]*v1.Pod, error) {
	p.mu.Lock()
	pods := make([]*v1.Pod, 0, len(p.workers))
	known := map[string]bool{}
	for _, w := range p.workers {
		pod := w.podWithStatus()
		pods = append(pods, pod)
		known[string(pod.UID)] = true
	}
	p.mu.Unlock()
	sbs, err := p.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{labelNode: p.cfg.NodeName}})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	for _, sb := range sbs {
		md := sb.GetMetadata()
		if md == nil || known[md.Uid] {
			continue
		}
		known[md.Uid] = true
		pods = append(pods, &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: md.Name, Namespace: md.Namespace, UID: types.UID(md.Uid)},
			Spec:       v1.PodSpec{NodeName: p.cfg.NodeName},
		})
	}
	return pods, nil
}

// The streaming calls of nodeutil.Provider are not used: the kubelet API
// proxies exec, attach and port-forward to the runtime's own streaming
// server (streaming.go), as kubelet does.

// RunInContainer is not used; see streaming.go.
func (p *Provider) RunInContainer(context.Context, string, string, string, []string, api.AttachIO) error {
	return errdefs.InvalidInput("exec is proxied to the runtime's streaming server")
}

// AttachToContainer is not used; see streaming.go.
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("attach is proxied to the runtime's streaming server")
}

// PortForward is not used; see streaming.go.
func (p *Provider) PortForward(context.Context, string, string, int32, io.ReadWriteCloser) error {
	return errdefs.InvalidInput("port-forward is proxied to the runtime's streaming server")
}

// GetStatsSummary and GetMetricsResource are in stats.go and
// stats_metrics.go.

// apiObjects reads configMaps and secrets from their watches
// (volumes_watch.go), and from the API server when a watch has not
// listed its object yet.
type apiObjects struct {
	client  kubernetes.Interface
	watches *objectWatches // nil without a client
	// Set by newAPIObjects (volumes_objects.go).
	serviceLister corev1listers.ServiceLister
	tokens        *tokenManager
	alloc         atomic.Pointer[v1.ResourceList]
}

func (o *apiObjects) configMap(ns, name string) (*v1.ConfigMap, error) {
	if o.client == nil {
		return nil, fmt.Errorf("%w: configMap %s/%s", errNotFound, ns, name)
	}
	if obj, ok := o.watches.cached(objectRef{kindConfigMap, ns, name}); ok {
		if cm, _ := obj.(*v1.ConfigMap); cm != nil {
			return cm, nil
		}
		return nil, fmt.Errorf("%w: configMap %s/%s", errNotFound, ns, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cm, err := o.client.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: configMap %s/%s", errNotFound, ns, name)
	}
	return cm, err
}

func (o *apiObjects) secret(ns, name string) (*v1.Secret, error) {
	if o.client == nil {
		return nil, fmt.Errorf("%w: secret %s/%s", errNotFound, ns, name)
	}
	if obj, ok := o.watches.cached(objectRef{kindSecret, ns, name}); ok {
		if s, _ := obj.(*v1.Secret); s != nil {
			return s, nil
		}
		return nil, fmt.Errorf("%w: secret %s/%s", errNotFound, ns, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := o.client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: secret %s/%s", errNotFound, ns, name)
	}
	return s, err
}
