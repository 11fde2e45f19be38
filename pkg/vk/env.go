package vk

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
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
// errNotFound. vols are the pod's volumes, which fileKeyRef reads from.
func makeEnv(pod *v1.Pod, c *v1.Container, ips podIPs, src objectSource, vols map[string]volume) ([]*runtimeapi.KeyValue, error) {
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
		v, ok, err := envValueFrom(pod, c, e.ValueFrom, ips, src, vols)
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
func envValueFrom(pod *v1.Pod, c *v1.Container, from *v1.EnvVarSource, ips podIPs, src objectSource, vols map[string]volume) (string, bool, error) {
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
	case from.FileKeyRef != nil:
		return fileKeyValue(pod, from.FileKeyRef, vols)
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

// fileKeyValue resolves a fileKeyRef as kubelet does: the key's value in
// an env file (envFileValue) of the pod's volume (an emptyDir, which the
// API server checks), written there by, say, an init container. A key
// that is missing or empty unsets the variable when optional and is an
// error otherwise; a file that is missing or not well formed is an error
// either way. The error says no more than kubelet's, the details go to
// the log.
func fileKeyValue(pod *v1.Pod, ref *v1.FileKeySelector, vols map[string]volume) (string, bool, error) {
	vol, ok := vols[ref.VolumeName]
	if !ok {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	v, err := readEnvFile(vol.hostPath, ref.Path, ref.Key)
	if err != nil {
		klog.ErrorS(err, "Failed to parse env file", "pod", klog.KObj(pod), "volume", ref.VolumeName, "path", ref.Path)
		return "", false, errors.New("couldn't parse env file")
	}
	if v == "" {
		if ref.Optional != nil && *ref.Optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q", ref.Key, filepath.Join(vol.hostPath, ref.Path))
	}
	return v, true, nil
}

// readEnvFile is envFileValue of the file at path in dir, which it cannot
// leave (by "..", or by a symlink the pod made).
func readEnvFile(dir, path, key string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, err := root.Open(path)
	if err != nil {
		return "", fmt.Errorf("failed to open environment variable file %q: %w", path, err)
	}
	defer f.Close()
	return envFileValue(f, key)
}

// envFileValue is key's value in an env file as kubelet (1.35+) reads it,
// "" when the key is not there: KEY='value' lines, the value quoted in
// single quotes and taken literally, new lines included; blank lines and
// # comments (also after the closing quote) are skipped; no blank before
// the "="; a blank right after it makes the value empty (as a shell does
// with KEY= 'x'). The first assignment of key wins, and the file is
// checked only up to it.
func envFileValue(r io.Reader, key string) (string, error) {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimLeft(sc.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return "", fmt.Errorf("invalid environment variable format at line %d: missing '='", n)
		case strings.TrimRight(name, " \t") == "":
			return "", fmt.Errorf("invalid environment variable format at line %d: empty variable name", n)
		case strings.TrimRight(name, " \t") != name:
			return "", fmt.Errorf("invalid environment variable format at line %d: whitespace before '=' is not allowed", n)
		}
		if trimmed := strings.TrimLeft(value, " \t"); trimmed != value {
			if name == key {
				return "", nil
			}
			continue
		}
		rest, ok := strings.CutPrefix(value, "'")
		if !ok {
			return "", fmt.Errorf("invalid environment variable format at line %d: value must be enclosed in single quotes", n)
		}
		var b strings.Builder
		start := n
		for {
			content, after, closed := strings.Cut(rest, "'")
			if closed {
				b.WriteString(content)
				if after = strings.TrimLeft(after, " \t"); after != "" && !strings.HasPrefix(after, "#") {
					return "", fmt.Errorf("invalid environment variable format at line %d: unexpected content after closing quote", n)
				}
				break
			}
			b.WriteString(rest)
			b.WriteByte('\n')
			if !sc.Scan() {
				if err := sc.Err(); err != nil {
					return "", err
				}
				return "", fmt.Errorf("invalid environment variable format starting at line %d: unclosed single quote", start)
			}
			n++
			rest = sc.Text()
		}
		if name == key {
			return b.String(), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("error reading environment variable file: %w", err)
	}
	return "", nil
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
