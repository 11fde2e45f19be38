package vk

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podIPs are the addresses env and the downward API may refer to, known
// once the sandbox runs.
type podIPs struct {
	podIPs  []string
	hostIPs []string
}

// makeEnv resolves a container's environment as kubelet does: envFrom
// first (configMaps and secrets, with prefix), then env in order, each
// value expanded with $(VAR) against what came before and the service
// links, then the service links the container did not set itself. A
// missing object or key that is not optional is an error wrapping
// errNotFound.
func makeEnv(pod *v1.Pod, c *v1.Container, ips podIPs, src objectSource) ([]*runtimeapi.KeyValue, error) {
	svcEnv, err := serviceLinkEnv(pod, src)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := env[k]; !ok {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			optional := from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
			cm, err := src.configMap(pod.Namespace, from.ConfigMapRef.Name)
			if errors.Is(err, errNotFound) && optional {
				continue
			}
			if err != nil {
				return nil, err
			}
			for k, v := range sortedMap(cm.Data) {
				if k = from.Prefix + k; len(validation.IsEnvVarName(k)) == 0 {
					set(k, v)
				}
			}
		case from.SecretRef != nil:
			optional := from.SecretRef.Optional != nil && *from.SecretRef.Optional
			s, err := src.secret(pod.Namespace, from.SecretRef.Name)
			if errors.Is(err, errNotFound) && optional {
				continue
			}
			if err != nil {
				return nil, err
			}
			for k, v := range sortedMap(s.Data) {
				if k = from.Prefix + k; len(validation.IsEnvVarName(k)) == 0 {
					set(k, string(v))
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandWith(e.Value, env, svcEnv))
			continue
		}
		v, ok, err := envValueFrom(pod, c, e.ValueFrom, ips, src)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	kv := make([]*runtimeapi.KeyValue, 0, len(order)+len(svcEnv))
	for _, k := range order {
		kv = append(kv, &runtimeapi.KeyValue{Key: k, Value: []byte(env[k])})
	}
	for k, v := range sortedMap(svcEnv) {
		if _, ok := env[k]; !ok {
			kv = append(kv, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
		}
	}
	return kv, nil
}

// envValueFrom resolves one valueFrom; ok is false for an optional key
// that is missing (the variable is then not set).
func envValueFrom(pod *v1.Pod, c *v1.Container, from *v1.EnvVarSource, ips podIPs, src objectSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := podFieldValue(pod, from.FieldRef.FieldPath, c.Name, &ips)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := resourceFieldValue(pod, c.Name, from.ResourceFieldRef, allocatableOf(src))
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := src.configMap(pod.Namespace, ref.Name)
		if err != nil {
			if errors.Is(err, errNotFound) && optional {
				return "", false, nil
			}
			return "", false, err
		}
		if v, ok := cm.Data[ref.Key]; ok {
			return v, true, nil
		}
		if v, ok := cm.BinaryData[ref.Key]; ok {
			return string(v), true, nil
		}
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("%w: key %q in configMap %s/%s", errNotFound, ref.Key, pod.Namespace, ref.Name)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := src.secret(pod.Namespace, ref.Name)
		if err != nil {
			if errors.Is(err, errNotFound) && optional {
				return "", false, nil
			}
			return "", false, err
		}
		if v, ok := s.Data[ref.Key]; ok {
			return string(v), true, nil
		}
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("%w: key %q in secret %s/%s", errNotFound, ref.Key, pod.Namespace, ref.Name)
	}
	// TODO(issue 7): fileKeyRef.
	return "", false, fmt.Errorf("unsupported valueFrom")
}

// podFieldValue is a fieldRef's value. ips is nil for downwardAPI volumes,
// which cannot refer to status fields.
func podFieldValue(pod *v1.Pod, path, _ string, ips *podIPs) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	}
	if k, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	if ips != nil {
		first := func(s []string) string {
			if len(s) == 0 {
				return ""
			}
			return s[0]
		}
		switch path {
		case "status.podIP":
			return first(ips.podIPs), nil
		case "status.podIPs":
			return strings.Join(ips.podIPs, ","), nil
		case "status.hostIP":
			return first(ips.hostIPs), nil
		case "status.hostIPs":
			return strings.Join(ips.hostIPs, ","), nil
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// subscript parses prefix['key'].
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// expand replaces $(VAR) in s with env's value of VAR, as kubelet does
// for env values, command and args: $$ is a literal $, and a reference to
// an unknown variable stays as it is.
func expand(s string, env map[string]string) string { return expandWith(s, env, nil) }

// expandWith is expand looking up env first, then more.
func expandWith(s string, env, more map[string]string) string {
	return expandFunc(s, func(name string) string {
		if v, ok := env[name]; ok {
			return v
		}
		if v, ok := more[name]; ok {
			return v
		}
		return "$(" + name + ")"
	})
}

// expandFunc replaces each $(VAR) in s with value(VAR), with the syntax of
// kubelet's expansion package: $$ is a literal $, a $ before anything else
// stays, and so does a "$(" that no ")" closes (what follows it is still
// read: "$(a $$" is "$(a $").
func expandFunc(s string, value func(name string) string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString("$(")
				i++
				continue
			}
			b.WriteString(value(s[i+2 : i+2+end]))
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// sortedMap iterates m in key order, so envFrom is deterministic.
func sortedMap[V any](m map[string]V) func(func(string, V) bool) {
	return func(yield func(string, V) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}
