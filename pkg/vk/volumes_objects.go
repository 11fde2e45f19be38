package vk

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// newAPIObjects is the provider's objectSource: configMaps, secrets and
// services from the informers' caches, tokens from the TokenRequest API.
func newAPIObjects(cfg Config) *apiObjects {
	o := &apiObjects{client: cfg.Client, configMaps: cfg.ConfigMaps, secrets: cfg.Secrets, serviceLister: cfg.Services}
	if cfg.Client != nil {
		o.tokens = newTokenManager(clientTokenRequester(cfg.Client), cfg.Clock)
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
// downward API's defaulted limits.
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
