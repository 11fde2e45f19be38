package vk

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Service links: the Docker-links style variables kubelet gives every
// container (getServiceEnvVarMap, pkg/kubelet/envvars): for each service of
// the pod's namespace with a cluster IP when enableServiceLinks is true
// (the default), and for the master service "kubernetes" of the default
// namespace always.

const masterService = "kubernetes"

// serviceSource lists services (apiObjects, from the informer's cache).
type serviceSource interface {
	services(namespace string) ([]*v1.Service, error)
}

// serviceLinkEnv is the service variables for pod; nil without a
// serviceSource.
func serviceLinkEnv(pod *v1.Pod, src objectSource) (map[string]string, error) {
	ss, ok := src.(serviceSource)
	if !ok {
		return nil, nil
	}
	enable := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	byName := map[string]*v1.Service{}
	if enable {
		svcs, err := ss.services(pod.Namespace)
		if err != nil {
			return nil, fmt.Errorf("list services of %s: %w", pod.Namespace, err)
		}
		for _, s := range svcs {
			byName[s.Name] = s
		}
	}
	if pod.Namespace != metav1.NamespaceDefault || !enable {
		// A "kubernetes" service of the pod's own namespace wins, as
		// in kubelet.
		svcs, err := ss.services(metav1.NamespaceDefault)
		if err != nil {
			return nil, fmt.Errorf("list services of %s: %w", metav1.NamespaceDefault, err)
		}
		for _, s := range svcs {
			if _, taken := byName[s.Name]; s.Name == masterService && !taken {
				byName[s.Name] = s
			}
		}
	}
	env := map[string]string{}
	for _, s := range byName {
		for _, kv := range serviceEnvVars(s) {
			env[kv[0]] = kv[1]
		}
	}
	return env, nil
}

func serviceIPSet(s *v1.Service) bool {
	return s.Spec.ClusterIP != "" && s.Spec.ClusterIP != v1.ClusterIPNone
}

func envVarName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// serviceEnvVars is one service's variables, as envvars.FromServices makes
// them: NAME_SERVICE_HOST, NAME_SERVICE_PORT (first port),
// NAME_SERVICE_PORT_<PORTNAME> (named ports), then the Docker link
// variables NAME_PORT and NAME_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR].
func serviceEnvVars(s *v1.Service) [][2]string {
	if !serviceIPSet(s) || len(s.Spec.Ports) == 0 {
		return nil
	}
	name := envVarName(s.Name)
	ip := s.Spec.ClusterIP
	out := [][2]string{
		{name + "_SERVICE_HOST", ip},
		{name + "_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port))},
	}
	for _, sp := range s.Spec.Ports {
		if sp.Name != "" {
			out = append(out, [2]string{name + "_SERVICE_PORT_" + envVarName(sp.Name), strconv.Itoa(int(sp.Port))})
		}
	}
	for i, sp := range s.Spec.Ports {
		proto := string(v1.ProtocolTCP)
		if sp.Protocol != "" {
			proto = string(sp.Protocol)
		}
		url := strings.ToLower(proto) + "://" + net.JoinHostPort(ip, strconv.Itoa(int(sp.Port)))
		if i == 0 {
			out = append(out, [2]string{name + "_PORT", url})
		}
		prefix := fmt.Sprintf("%s_PORT_%d_%s", name, sp.Port, strings.ToUpper(proto))
		out = append(out,
			[2]string{prefix, url},
			[2]string{prefix + "_PROTO", strings.ToLower(proto)},
			[2]string{prefix + "_PORT", strconv.Itoa(int(sp.Port))},
			[2]string{prefix + "_ADDR", ip},
		)
	}
	return out
}

// services implements serviceSource from the informer's cache (indexed by
// namespace, so this stays cheap in a large cluster).
func (o *apiObjects) services(ns string) ([]*v1.Service, error) {
	if o.serviceLister == nil {
		return nil, nil
	}
	svcs, err := o.serviceLister.Services(ns).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	// Sorted, so that a container's env does not change order from one
	// start to the next.
	slices.SortFunc(svcs, func(a, b *v1.Service) int { return strings.Compare(a.Name, b.Name) })
	return svcs, nil
}
