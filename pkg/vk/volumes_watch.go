package vk

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A changed configMap or secret reaches the pods that mount it at their
// next pass (setUpVolumes rewrites what changed). Without a nudge that is
// the resync period (30 s); the informers' events wake exactly the pods
// that mount the object, so an update lands in about a second, which is
// what kubelet's watch-based configMap and secret managers achieve.

type objectKind int

const (
	kindConfigMap objectKind = iota
	kindSecret
)

// WatchObjects wakes the pods that mount a configMap or secret when it
// changes. The informers are the ones whose listers the provider reads
// (nodeutil's), so this adds no watch of its own.
func (p *Provider) WatchObjects(configMaps, secrets cache.SharedInformer) error {
	for _, w := range []struct {
		inf  cache.SharedInformer
		kind objectKind
	}{{configMaps, kindConfigMap}, {secrets, kindSecret}} {
		if w.inf == nil {
			continue
		}
		kind := w.kind
		_, err := w.inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(obj any, initial bool) {
				if !initial { // an optional object that now exists
					p.objectChanged(kind, obj)
				}
			},
			UpdateFunc: func(old, obj any) {
				o, err1 := meta.Accessor(old)
				n, err2 := meta.Accessor(obj)
				if err1 == nil && err2 == nil && o.GetResourceVersion() == n.GetResourceVersion() {
					return // an informer resync, not a change
				}
				p.objectChanged(kind, obj)
			},
			DeleteFunc: func(obj any) { p.objectChanged(kind, obj) },
		})
		if err != nil {
			return fmt.Errorf("watch objects: %w", err)
		}
	}
	return nil
}

func (p *Provider) objectChanged(kind objectKind, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ns, name := m.GetNamespace(), m.GetName()
	p.mu.Lock()
	var wake []*podWorker
	for _, w := range p.workers {
		if pod := w.pod(); pod.Namespace == ns && mountsObject(pod, kind, name) {
			wake = append(wake, w)
		}
	}
	p.mu.Unlock()
	for _, w := range wake {
		klog.V(4).InfoS("Object changed; syncing the pod's volumes", "object", ns+"/"+name, "pod", klog.KObj(w.pod()))
		w.poke()
	}
}

// mountsObject tells whether one of pod's volumes shows the configMap or
// secret name (env is read only when a container starts, as in kubelet).
func mountsObject(pod *v1.Pod, kind objectKind, name string) bool {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch {
		case kind == kindConfigMap && v.ConfigMap != nil && v.ConfigMap.Name == name,
			kind == kindSecret && v.Secret != nil && v.Secret.SecretName == name:
			return true
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if (kind == kindConfigMap && s.ConfigMap != nil && s.ConfigMap.Name == name) ||
					(kind == kindSecret && s.Secret != nil && s.Secret.Name == name) {
					return true
				}
			}
		}
	}
	return false
}
