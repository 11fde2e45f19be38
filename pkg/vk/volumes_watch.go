package vk

import (
	"context"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ConfigMaps and secrets are read as kubelet's watch-based managers read
// them: one watch per object that a pod of the node references, in its
// namespace with the field selector metadata.name=<name>, kept while a
// pod references it (counted per pod). That is all the Node authorizer
// lets a node read: get, list and watch of a single named object that a
// pod bound to the node references; a cluster-wide informer is refused.
//
// The watches also keep pods up to date: a changed object reaches the
// pods that mount it in about a second, not at the next resync (30 s).

type objectKind int

const (
	kindConfigMap objectKind = iota
	kindSecret
)

func (k objectKind) String() string {
	if k == kindSecret {
		return "secret"
	}
	return "configMap"
}

// objectRef names one configMap or secret.
type objectRef struct {
	kind      objectKind
	namespace string
	name      string
}

// objectWatches holds the per-object watches, counted by the pods that
// reference each object.
type objectWatches struct {
	client kubernetes.Interface
	// changed is called when a watched object is added (after the
	// watch's first list), updated or deleted.
	changed func(objectRef)

	mu      sync.Mutex
	watches map[objectRef]*objectWatch
	pods    map[types.UID][]objectRef // what each registered pod references
	stopped bool
}

type objectWatch struct {
	refs   int
	store  cache.Store
	synced func() bool
	stop   chan struct{}
	// fetched is set when a reader went to the API server because the
	// watch had not listed yet. What it read may be older than the
	// watch's first list, and a change in between arrives as part of
	// that list, not as an update: the list then tells it as a change.
	fetched atomic.Bool
}

func newObjectWatches(client kubernetes.Interface, changed func(objectRef)) *objectWatches {
	return &objectWatches{client: client, changed: changed, watches: map[objectRef]*objectWatch{}, pods: map[types.UID][]objectRef{}}
}

// registerPod makes the watches pod's references need and drops those
// its earlier spec needed and this one does not (kubelet's RegisterPod).
func (o *objectWatches) registerPod(pod *v1.Pod) {
	refs := podObjectRefs(pod)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopped {
		return
	}
	for _, r := range refs {
		o.acquire(r)
	}
	for _, r := range o.pods[pod.UID] {
		o.release(r)
	}
	o.pods[pod.UID] = refs
}

// unregisterPod drops the references of a pod that is gone.
func (o *objectWatches) unregisterPod(uid types.UID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.pods[uid] {
		o.release(r)
	}
	delete(o.pods, uid)
}

// stopAll ends every watch (the provider stops).
func (o *objectWatches) stopAll() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for r, w := range o.watches {
		close(w.stop)
		delete(o.watches, r)
	}
	o.pods = map[types.UID][]objectRef{}
	o.stopped = true
}

func (o *objectWatches) acquire(r objectRef) {
	if w := o.watches[r]; w != nil {
		w.refs++
		return
	}
	w := &objectWatch{refs: 1, stop: make(chan struct{})}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: o.listWatch(r),
		ObjectType:    objectType(r.kind),
		Handler: cache.FilteringResourceEventHandler{
			// The API server sends only r; a source that ignores field
			// selectors (a fake clientset) does not.
			FilterFunc: func(obj any) bool {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				m, err := meta.Accessor(obj)
				return err == nil && m.GetName() == r.name
			},
			Handler: cache.ResourceEventHandlerDetailedFuncs{
				AddFunc: func(_ any, initial bool) {
					// Not initial: an optional object that now exists.
					if !initial || w.fetched.Load() {
						o.changed(r)
					}
				},
				UpdateFunc: func(old, obj any) {
					a, err1 := meta.Accessor(old)
					b, err2 := meta.Accessor(obj)
					if err1 == nil && err2 == nil && a.GetResourceVersion() == b.GetResourceVersion() {
						return // a relist, not a change
					}
					o.changed(r)
				},
				DeleteFunc: func(any) { o.changed(r) },
			},
		},
	})
	w.store, w.synced = store, ctrl.HasSynced
	o.watches[r] = w
	klog.V(4).InfoS("Watching object", "kind", r.kind, "object", klog.KRef(r.namespace, r.name))
	go ctrl.Run(w.stop)
}

func (o *objectWatches) release(r objectRef) {
	w := o.watches[r]
	if w == nil {
		return
	}
	if w.refs--; w.refs == 0 {
		close(w.stop)
		delete(o.watches, r)
		klog.V(4).InfoS("Stopped watching object", "kind", r.kind, "object", klog.KRef(r.namespace, r.name))
	}
}

// cached is the object from its watch: ok is false when no pod
// references it or the watch has not listed it yet (the caller asks the
// API server then); obj is nil when the watch's list found none.
func (o *objectWatches) cached(r objectRef) (obj any, ok bool) {
	o.mu.Lock()
	w := o.watches[r]
	o.mu.Unlock()
	if w == nil {
		return nil, false
	}
	if !w.synced() {
		// Marked before the caller's GET: either the first list sees
		// the mark, or the GET starts after that list and is newer.
		w.fetched.Store(true)
		return nil, false
	}
	obj, exists, err := w.store.GetByKey(r.namespace + "/" + r.name)
	if err != nil {
		return nil, false
	}
	if !exists {
		return nil, true
	}
	return obj, true
}

// watching is the number of watches open (for tests).
func (o *objectWatches) watching() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.watches)
}

func objectType(k objectKind) runtime.Object {
	if k == kindSecret {
		return &v1.Secret{}
	}
	return &v1.ConfigMap{}
}

// listWatch lists and watches the one object r, as the Node authorizer
// allows it.
func (o *objectWatches) listWatch(r objectRef) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector(metav1.ObjectNameField, r.name).String()
	var list func(context.Context, metav1.ListOptions) (runtime.Object, error)
	var watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)
	if r.kind == kindSecret {
		c := o.client.CoreV1().Secrets(r.namespace)
		list = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, opts) }
		watchFn = c.Watch
	} else {
		c := o.client.CoreV1().ConfigMaps(r.namespace)
		list = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, opts) }
		watchFn = c.Watch
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return list(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return watchFn(ctx, opts)
		},
	}
	// As the generated informers: a fake clientset cannot stream lists.
	return cache.ToListWatcherWithWatchListSemantics(lw, o.client)
}

// podObjectRefs lists the configMaps and secrets pod references, as
// kubelet's VisitPodConfigmapNames and VisitPodSecretNames find them:
// volumes (projected sources too), env and envFrom of every container
// (init and ephemeral ones too) and, for secrets, imagePullSecrets.
func podObjectRefs(pod *v1.Pod) []objectRef {
	seen := map[objectRef]bool{}
	var refs []objectRef
	add := func(k objectKind, name string) {
		r := objectRef{kind: k, namespace: pod.Namespace, name: name}
		if name != "" && !seen[r] {
			seen[r] = true
			refs = append(refs, r)
		}
	}
	for _, s := range pod.Spec.ImagePullSecrets {
		add(kindSecret, s.Name)
	}
	volumeObjects(pod, add)
	envOf := func(env []v1.EnvVar, from []v1.EnvFromSource) {
		for _, f := range from {
			if f.ConfigMapRef != nil {
				add(kindConfigMap, f.ConfigMapRef.Name)
			}
			if f.SecretRef != nil {
				add(kindSecret, f.SecretRef.Name)
			}
		}
		for _, e := range env {
			if e.ValueFrom == nil {
				continue
			}
			if e.ValueFrom.ConfigMapKeyRef != nil {
				add(kindConfigMap, e.ValueFrom.ConfigMapKeyRef.Name)
			}
			if e.ValueFrom.SecretKeyRef != nil {
				add(kindSecret, e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	for _, c := range pod.Spec.InitContainers {
		envOf(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.Containers {
		envOf(c.Env, c.EnvFrom)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		envOf(c.Env, c.EnvFrom)
	}
	return refs
}

// objectChanged wakes the pods that mount the configMap or secret r, so
// that their next pass rewrites the files (setUpVolumes rewrites what
// changed).
func (p *Provider) objectChanged(r objectRef) {
	p.mu.Lock()
	var wake []*podWorker
	for _, w := range p.workers {
		if pod := w.pod(); pod.Namespace == r.namespace && mountsObject(pod, r.kind, r.name) {
			wake = append(wake, w)
		}
	}
	p.mu.Unlock()
	for _, w := range wake {
		klog.V(4).InfoS("Object changed; syncing the pod's volumes", "kind", r.kind, "object", klog.KRef(r.namespace, r.name), "pod", klog.KObj(w.pod()))
		w.poke()
	}
}

// mountsObject tells whether one of pod's volumes shows the configMap or
// secret name (env is read only when a container starts, as in kubelet).
func mountsObject(pod *v1.Pod, kind objectKind, name string) bool {
	found := false
	volumeObjects(pod, func(k objectKind, n string) {
		found = found || (k == kind && n == name)
	})
	return found
}

// volumeObjects calls fn with each configMap and secret that pod's volumes
// show, projected sources included.
func volumeObjects(pod *v1.Pod, fn func(objectKind, string)) {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch {
		case v.ConfigMap != nil:
			fn(kindConfigMap, v.ConfigMap.Name)
		case v.Secret != nil:
			fn(kindSecret, v.Secret.SecretName)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					fn(kindConfigMap, s.ConfigMap.Name)
				}
				if s.Secret != nil {
					fn(kindSecret, s.Secret.Name)
				}
			}
		}
	}
}
