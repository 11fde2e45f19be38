package vk

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// newAPIObjects is the provider's objectSource: configMaps and secrets
// from their per-object watches (changed tells of a change), services
// from the lister, tokens from the TokenRequest API.
func newAPIObjects(cfg Config, changed func(objectRef)) *apiObjects {
	o := &apiObjects{client: cfg.Client, serviceLister: cfg.Services}
	if cfg.Client != nil {
		o.tokens = newTokenManager(clientTokenRequester(cfg.Client), cfg.Clock)
		o.watches = newObjectWatches(cfg.Client, changed)
	}
	return o
}

// allocatable implements allocatableSource.
func (o *apiObjects) allocatable() v1.ResourceList {
	if r := o.alloc.Load(); r != nil {
		return *r
	}
	return nil
}

// setAllocatable records the node's allocatable resources, for the
// downward API's defaulted limits and for resizes.
func (p *Provider) setAllocatable(r v1.ResourceList) {
	if o, ok := p.objects.(*apiObjects); ok {
		r = r.DeepCopy()
		o.alloc.Store(&r)
	}
}

// forgetTokens drops the tokens of a pod that is gone.
func forgetTokens(src objectSource, uid types.UID) {
	if o, ok := src.(*apiObjects); ok && o.tokens != nil {
		o.tokens.forgetPod(uid)
	}
}

// registerObjects watches the configMaps and secrets pod references, as
// long as it references them.
func registerObjects(src objectSource, pod *v1.Pod) {
	if o, ok := src.(*apiObjects); ok && o.watches != nil {
		o.watches.registerPod(pod)
	}
}

// unregisterObjects drops the watches only a pod that is gone needed.
func unregisterObjects(src objectSource, uid types.UID) {
	if o, ok := src.(*apiObjects); ok && o.watches != nil {
		o.watches.unregisterPod(uid)
	}
}

// stopObjectWatches ends every watch, when the provider stops.
func stopObjectWatches(src objectSource) {
	if o, ok := src.(*apiObjects); ok && o.watches != nil {
		o.watches.stopAll()
	}
}
