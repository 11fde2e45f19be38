package vk

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodDNS(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# host\nnameserver 127.0.0.53\nnameserver 192.0.2.53\nsearch example.org\noptions edns0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	five := "2"
	pod := func(policy v1.DNSPolicy, hostNet bool, cfg *v1.PodDNSConfig) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: v1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	withCluster := DNS{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ResolvConf: resolv}
	noCluster := DNS{ResolvConf: resolv}
	for _, tc := range []struct {
		name string
		d    DNS
		pod  *v1.Pod
		want *runtimeapi.DNSConfig
	}{
		{"ClusterFirst", withCluster, pod(v1.DNSClusterFirst, false, nil), &runtimeapi.DNSConfig{
			Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local", "example.org"}, Options: []string{"ndots:5"}}},
		{"ClusterFirst without cluster DNS is Default", noCluster, pod(v1.DNSClusterFirst, false, nil), &runtimeapi.DNSConfig{
			Servers: []string{"192.0.2.53"}, Searches: []string{"example.org"}, Options: []string{"edns0"}}},
		{"ClusterFirst on the host network is Default", withCluster, pod(v1.DNSClusterFirst, true, nil), &runtimeapi.DNSConfig{
			Servers: []string{"192.0.2.53"}, Searches: []string{"example.org"}, Options: []string{"edns0"}}},
		{"None with dnsConfig", withCluster, pod(v1.DNSNone, false, &v1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.b"},
			Options: []v1.PodDNSConfigOption{{Name: "ndots", Value: &five}}}), &runtimeapi.DNSConfig{
			Servers: []string{"1.1.1.1"}, Searches: []string{"a.b"}, Options: []string{"ndots:2"}}},
		{"Default with dnsConfig overriding an option", noCluster, pod(v1.DNSDefault, false, &v1.PodDNSConfig{
			Options: []v1.PodDNSConfigOption{{Name: "edns0"}, {Name: "ndots", Value: &five}}}), &runtimeapi.DNSConfig{
			Servers: []string{"192.0.2.53"}, Searches: []string{"example.org"}, Options: []string{"edns0", "ndots:2"}}},
		{"Default without resolv.conf: the runtime's", DNS{}, pod(v1.DNSDefault, false, nil), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.d.podDNS(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == nil) || got != nil && (!slices.Equal(got.Servers, tc.want.Servers) ||
				!slices.Equal(got.Searches, tc.want.Searches) || !slices.Equal(got.Options, tc.want.Options)) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSandboxConfig(t *testing.T) {
	p := &Provider{cfg: Config{NodeName: "n1", StateDir: "/state"}}
	share := true
	priv := true
	user := int64(1000)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a-very-long-pod-name-that-goes-on-and-on-and-on-beyond-sixty-three-chars", Namespace: "ns", UID: "u",
			Labels: map[string]string{"app": "x"}, Annotations: map[string]string{"note": "y"}},
		Spec: v1.PodSpec{
			HostIPC: true, ShareProcessNamespace: &share, DNSPolicy: v1.DNSNone,
			SecurityContext: &v1.PodSecurityContext{RunAsUser: &user, Sysctls: []v1.Sysctl{{Name: "net.core.somaxconn", Value: "1024"}, {Name: "kernel/shm_rmid_forced", Value: "1"}}},
			Containers: []v1.Container{{Name: "c", Ports: []v1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 81}, {ContainerPort: 53, HostPort: 5353, Protocol: v1.ProtocolUDP}},
				SecurityContext: &v1.SecurityContext{Privileged: &priv}}},
		},
	}
	cfg, err := p.makeSandboxConfig(pod, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Hostname) != 63 || cfg.Metadata.Attempt != 2 || cfg.Metadata.Uid != "u" {
		t.Errorf("hostname %q metadata %v", cfg.Hostname, cfg.Metadata)
	}
	if cfg.Labels["app"] != "x" || cfg.Labels[labelPodUID] != "u" || cfg.Labels[labelNode] != "n1" || cfg.Annotations["note"] != "y" {
		t.Errorf("labels %v annotations %v", cfg.Labels, cfg.Annotations)
	}
	if len(cfg.PortMappings) != 2 || cfg.PortMappings[1].Protocol != runtimeapi.Protocol_UDP || cfg.PortMappings[0].HostPort != 8080 {
		t.Errorf("ports %v", cfg.PortMappings)
	}
	ns := cfg.Linux.SecurityContext.NamespaceOptions
	if ns.Ipc != runtimeapi.NamespaceMode_NODE || ns.Pid != runtimeapi.NamespaceMode_POD || ns.Network != runtimeapi.NamespaceMode_POD {
		t.Errorf("namespaces %v", ns)
	}
	if !cfg.Linux.SecurityContext.Privileged || cfg.Linux.SecurityContext.RunAsUser.GetValue() != 1000 || cfg.Linux.Sysctls["net.core.somaxconn"] != "1024" ||
		cfg.Linux.Sysctls["kernel.shm_rmid_forced"] != "1" || len(cfg.Linux.Sysctls) != 2 {
		t.Errorf("security %v sysctls %v", cfg.Linux.SecurityContext, cfg.Linux.Sysctls)
	}
	if cfg.LogDirectory != "/state/logs/ns_"+pod.Name+"_u" {
		t.Errorf("log directory %s", cfg.LogDirectory)
	}
}
