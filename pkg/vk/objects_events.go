package vk

import (
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// virtual-kubelet's events for a configMap or secret a pod references
// that is not there (its internal/podutils env.go, which its provider
// suite, test/e2e, waits for), recorded beside kubelet's own (the
// container's Failed event, CreateContainerConfigError, FailedMount) so
// that both kinds of tooling see them.
const (
	reasonOptionalConfigMapNotFound  = "OptionalConfigMapNotFound"
	reasonMandatoryConfigMapNotFound = "MandatoryConfigMapNotFound"
	reasonOptionalSecretNotFound     = "OptionalSecretNotFound"
	reasonMandatorySecretNotFound    = "MandatorySecretNotFound"
)

// objectEvent is one Warning event about a pod.
type objectEvent struct{ reason, message string }

func isMissing(err error) bool { return errors.Is(err, errNotFound) }

// envObjectEvents are virtual-kubelet's events for the configMaps and
// secrets container c's envFrom and env reference that are missing, with
// its messages, in its order: envFrom, then env, up to the first
// mandatory one (where virtual-kubelet stops resolving).
func envObjectEvents(pod *v1.Pod, c *v1.Container, src objectSource) []objectEvent {
	var evs []objectEvent
	missing := func(optional bool, optReason, manReason, optMsg, manMsg string) bool {
		if optional {
			evs = append(evs, objectEvent{optReason, optMsg})
			return false
		}
		evs = append(evs, objectEvent{manReason, manMsg})
		return true
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			ref := from.ConfigMapRef
			if _, err := src.configMap(pod.Namespace, ref.Name); isMissing(err) {
				msg := fmt.Sprintf("configmap %q not found", ref.Name)
				if missing(ptr.Deref(ref.Optional, false), reasonOptionalConfigMapNotFound, reasonMandatoryConfigMapNotFound, msg, msg) {
					return evs
				}
			}
		case from.SecretRef != nil:
			ref := from.SecretRef
			if _, err := src.secret(pod.Namespace, ref.Name); isMissing(err) {
				msg := fmt.Sprintf("secret %q not found", ref.Name)
				if missing(ptr.Deref(ref.Optional, false), reasonOptionalSecretNotFound, reasonMandatorySecretNotFound, msg, msg) {
					return evs
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		switch {
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if _, err := src.configMap(pod.Namespace, ref.Name); isMissing(err) {
				if missing(ptr.Deref(ref.Optional, false), reasonOptionalConfigMapNotFound, reasonMandatoryConfigMapNotFound,
					fmt.Sprintf("skipping optional envvar %q: configmap %q not found", e.Name, ref.Name),
					fmt.Sprintf("configmap %q not found", ref.Name)) {
					return evs
				}
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if _, err := src.secret(pod.Namespace, ref.Name); isMissing(err) {
				if missing(ptr.Deref(ref.Optional, false), reasonOptionalSecretNotFound, reasonMandatorySecretNotFound,
					fmt.Sprintf("skipping optional envvar %q: secret %q not found", e.Name, ref.Name),
					fmt.Sprintf("secret %q not found", ref.Name)) {
					return evs
				}
			}
		}
	}
	return evs
}

// volumeObjectEvents are the same events for the configMaps and secrets
// the pod's volumes (projected ones' sources too) reference that are
// missing, with the messages virtual-kubelet gives an envFrom.
func volumeObjectEvents(pod *v1.Pod, src objectSource) []objectEvent {
	var evs []objectEvent
	configMap := func(name string, optional *bool) {
		if _, err := src.configMap(pod.Namespace, name); isMissing(err) {
			reason := reasonMandatoryConfigMapNotFound
			if ptr.Deref(optional, false) {
				reason = reasonOptionalConfigMapNotFound
			}
			evs = append(evs, objectEvent{reason, fmt.Sprintf("configmap %q not found", name)})
		}
	}
	secret := func(name string, optional *bool) {
		if _, err := src.secret(pod.Namespace, name); isMissing(err) {
			reason := reasonMandatorySecretNotFound
			if ptr.Deref(optional, false) {
				reason = reasonOptionalSecretNotFound
			}
			evs = append(evs, objectEvent{reason, fmt.Sprintf("secret %q not found", name)})
		}
	}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		switch {
		case v.ConfigMap != nil:
			configMap(v.ConfigMap.Name, v.ConfigMap.Optional)
		case v.Secret != nil:
			secret(v.Secret.SecretName, v.Secret.Optional)
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ConfigMap != nil:
					configMap(s.ConfigMap.Name, s.ConfigMap.Optional)
				case s.Secret != nil:
					secret(s.Secret.Name, s.Secret.Optional)
				}
			}
		}
	}
	return evs
}

// objectEvents records evs on the pod, as Warnings.
func (p *Provider) objectEvents(pod *v1.Pod, evs []objectEvent) {
	for _, e := range evs {
		p.podEvent(pod, true, e.reason, e.message)
	}
}
