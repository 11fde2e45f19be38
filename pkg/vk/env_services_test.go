package vk

import (
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func svc(ns, name, ip string, ports ...v1.ServicePort) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

func envOf(kv []*runtimeapi.KeyValue) (map[string]string, []string) {
	m := map[string]string{}
	var keys []string
	for _, e := range kv {
		m[e.Key] = string(e.Value)
		keys = append(keys, e.Key)
	}
	return m, keys
}

func TestServiceLinks(t *testing.T) {
	src := &richObjects{fakeObjects: &fakeObjects{}, svcs: map[string][]*v1.Service{
		"default": {
			svc("default", "kubernetes", "10.0.0.1", v1.ServicePort{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}),
			svc("default", "other", "10.0.0.2", v1.ServicePort{Port: 1}),
		},
		"ns": {
			svc("ns", "my-web", "10.0.0.10", v1.ServicePort{Port: 80}, v1.ServicePort{Name: "dns-udp", Port: 53, Protocol: v1.ProtocolUDP}),
			svc("ns", "headless", v1.ClusterIPNone, v1.ServicePort{Port: 80}),
			svc("ns", "v6", "fd00::1", v1.ServicePort{Port: 8080}),
		},
	}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	c := &v1.Container{Name: "c", Env: []v1.EnvVar{
		{Name: "URL", Value: "http://$(MY_WEB_SERVICE_HOST):$(MY_WEB_SERVICE_PORT)/"},
		{Name: "MY_WEB_SERVICE_PORT", Value: "mine"}, // the container's own wins
	}}
	kv, err := makeEnv(pod, c, podIPs{}, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, keys := envOf(kv)
	want := map[string]string{
		"URL":                           "http://10.0.0.10:80/",
		"MY_WEB_SERVICE_PORT":           "mine",
		"MY_WEB_SERVICE_HOST":           "10.0.0.10",
		"MY_WEB_SERVICE_PORT_DNS_UDP":   "53",
		"MY_WEB_PORT":                   "tcp://10.0.0.10:80",
		"MY_WEB_PORT_80_TCP":            "tcp://10.0.0.10:80",
		"MY_WEB_PORT_80_TCP_PROTO":      "tcp",
		"MY_WEB_PORT_80_TCP_PORT":       "80",
		"MY_WEB_PORT_80_TCP_ADDR":       "10.0.0.10",
		"MY_WEB_PORT_53_UDP":            "udp://10.0.0.10:53",
		"MY_WEB_PORT_53_UDP_PROTO":      "udp",
		"MY_WEB_PORT_53_UDP_PORT":       "53",
		"MY_WEB_PORT_53_UDP_ADDR":       "10.0.0.10",
		"V6_SERVICE_HOST":               "fd00::1",
		"V6_SERVICE_PORT":               "8080",
		"V6_PORT":                       "tcp://[fd00::1]:8080",
		"V6_PORT_8080_TCP":              "tcp://[fd00::1]:8080",
		"V6_PORT_8080_TCP_PROTO":        "tcp",
		"V6_PORT_8080_TCP_PORT":         "8080",
		"V6_PORT_8080_TCP_ADDR":         "fd00::1",
		"KUBERNETES_SERVICE_HOST":       "10.0.0.1",
		"KUBERNETES_SERVICE_PORT":       "443",
		"KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT":               "tcp://10.0.0.1:443",
		"KUBERNETES_PORT_443_TCP":       "tcp://10.0.0.1:443",
		"KUBERNETES_PORT_443_TCP_PROTO": "tcp",
		"KUBERNETES_PORT_443_TCP_PORT":  "443",
		"KUBERNETES_PORT_443_TCP_ADDR":  "10.0.0.1",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) || len(keys) != len(want) {
		t.Errorf("%d variables (%d keys), want %d: %v", len(env), len(keys), len(want), keys)
	}
	// The container's own first, then the services', sorted.
	if keys[0] != "URL" || keys[1] != "MY_WEB_SERVICE_PORT" || !slices.IsSorted(keys[2:]) {
		t.Errorf("order %v", keys)
	}

	// enableServiceLinks: false keeps the master service only.
	no := false
	pod.Spec.EnableServiceLinks = &no
	kv, _ = makeEnv(pod, &v1.Container{Name: "c"}, podIPs{}, src, nil)
	env, _ = envOf(kv)
	if _, ok := env["MY_WEB_SERVICE_HOST"]; ok || env["KUBERNETES_SERVICE_HOST"] != "10.0.0.1" || len(env) != 8 {
		t.Errorf("links off: %v", env)
	}
	// In the default namespace: its services, the master one once.
	pod.Spec.EnableServiceLinks = nil
	pod.Namespace = "default"
	kv, _ = makeEnv(pod, &v1.Container{Name: "c"}, podIPs{}, src, nil)
	env, _ = envOf(kv)
	if env["OTHER_SERVICE_HOST"] != "10.0.0.2" || env["KUBERNETES_SERVICE_HOST"] != "10.0.0.1" || len(env) != 8+7 {
		t.Errorf("default namespace: %d %v", len(env), env)
	}
	// A "kubernetes" service of the pod's namespace wins, as in kubelet.
	src.svcs["ns"] = append(src.svcs["ns"], svc("ns", "kubernetes", "10.0.0.99", v1.ServicePort{Port: 1}))
	pod.Namespace = "ns"
	kv, _ = makeEnv(pod, &v1.Container{Name: "c"}, podIPs{}, src, nil)
	env, _ = envOf(kv)
	if env["KUBERNETES_SERVICE_HOST"] != "10.0.0.99" {
		t.Errorf("own kubernetes service: %q", env["KUBERNETES_SERVICE_HOST"])
	}
}

func TestResourceFieldRef(t *testing.T) {
	alloc := v1.ResourceList{
		v1.ResourceCPU:              resource.MustParse("4"),
		v1.ResourceMemory:           resource.MustParse("16Gi"),
		v1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	pod := &v1.Pod{Spec: v1.PodSpec{
		Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
			Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("100Mi"),
				"hugepages-2Mi": resource.MustParse("4Mi")},
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		}}, {Name: "nolimits"}},
		InitContainers: []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}},
	}}
	for _, c := range []struct {
		container, res, divisor, want string
	}{
		{"c", "limits.cpu", "", "2"},       // 1.5 rounded up
		{"c", "limits.cpu", "1m", "1500"},  // millicores
		{"c", "requests.cpu", "", "1"},     // 0.25 rounded up
		{"c", "requests.cpu", "1m", "250"}, //
		{"c", "limits.memory", "", "104857600"},
		{"c", "limits.memory", "1Mi", "100"},
		{"c", "requests.memory", "1Mi", "64"},
		{"c", "limits.hugepages-2Mi", "1Mi", "4"},
		{"c", "requests.ephemeral-storage", "", "0"},
		{"nolimits", "limits.cpu", "", "4"}, // the node's allocatable
		{"nolimits", "limits.memory", "1Gi", "16"},
		{"nolimits", "limits.ephemeral-storage", "1Gi", "100"},
		{"nolimits", "requests.cpu", "", "0"},
		{"init", "limits.cpu", "", "1"},
	} {
		ref := &v1.ResourceFieldSelector{ContainerName: c.container, Resource: c.res}
		if c.divisor != "" {
			ref.Divisor = resource.MustParse(c.divisor)
		}
		got, err := resourceFieldValue(pod, "", ref, alloc)
		if err != nil || got != c.want {
			t.Errorf("%s %s /%s = %q (%v), want %q", c.container, c.res, c.divisor, got, err, c.want)
		}
	}
	for _, bad := range []string{"limits.gpu", "cpu", "requests.pods"} {
		if _, err := resourceFieldValue(pod, "c", &v1.ResourceFieldSelector{Resource: bad}, alloc); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// In env, the container is the one being started unless named.
	src := &richObjects{fakeObjects: &fakeObjects{}, alloc: alloc}
	kv, err := makeEnv(pod, &pod.Spec.Containers[1], podIPs{}, src, nil)
	if err != nil || len(kv) != 0 {
		t.Fatal(kv, err)
	}
	c := pod.Spec.Containers[1]
	c.Env = []v1.EnvVar{{Name: "CPU", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.cpu"}}},
		{Name: "MEM", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}}}
	kv, err = makeEnv(pod, &c, podIPs{}, src, nil)
	env, _ := envOf(kv)
	if err != nil || env["CPU"] != "4" || env["MEM"] != "100" {
		t.Errorf("env %v %v", env, err)
	}
}

func TestFieldRefs(t *testing.T) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"k": "v"}, Annotations: map[string]string{"a": "b"}},
		Spec:       v1.PodSpec{NodeName: "n1", ServiceAccountName: "sa"},
	}
	ips := podIPs{podIPs: []string{"10.1.0.5", "fd00::5"}, hostIPs: []string{"192.0.2.1", "2001:db8::1"}}
	for path, want := range map[string]string{
		"metadata.name": "p", "metadata.namespace": "ns", "metadata.uid": "u",
		"metadata.labels['k']": "v", "metadata.annotations['a']": "b", "metadata.labels['none']": "",
		"spec.nodeName": "n1", "spec.serviceAccountName": "sa",
		"status.podIP": "10.1.0.5", "status.podIPs": "10.1.0.5,fd00::5",
		"status.hostIP": "192.0.2.1", "status.hostIPs": "192.0.2.1,2001:db8::1",
	} {
		if got, err := podFieldValue(pod, path, "c", &ips); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %q", path, got, err, want)
		}
	}
	// Volumes see no status fields (the API refuses them there).
	if _, err := podFieldValue(pod, "status.podIP", "", nil); err == nil {
		t.Error("status.podIP in a volume")
	}
}
