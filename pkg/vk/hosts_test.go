package vk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodHostnameAndDomain(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b"
	for _, tc := range []struct {
		name               string
		spec               v1.PodSpec
		podName            string
		wantHost, wantDom  string
		wantKernel, errHas string
	}{
		{name: "pod name", podName: "web", wantHost: "web", wantKernel: "web"},
		{name: "hostname and subdomain", podName: "web", spec: v1.PodSpec{Hostname: "h", Subdomain: "s"},
			wantHost: "h", wantDom: "s.ns.svc.cluster.local", wantKernel: "h"},
		{name: "FQDN", podName: "web", spec: v1.PodSpec{Hostname: "h", Subdomain: "s", SetHostnameAsFQDN: ptr.To(true)},
			wantHost: "h", wantDom: "s.ns.svc.cluster.local", wantKernel: "h.s.ns.svc.cluster.local"},
		{name: "FQDN without subdomain", podName: "web", spec: v1.PodSpec{SetHostnameAsFQDN: ptr.To(true)},
			wantHost: "web", wantKernel: "web"},
		{name: "override, no domain", podName: "web", spec: v1.PodSpec{HostnameOverride: ptr.To("my.host"), Subdomain: "s"},
			wantHost: "my.host", wantKernel: "my.host"},
		{name: "cut to 63 without the trailing dash", podName: long, wantHost: strings.Repeat("a", 62), wantKernel: strings.Repeat("a", 62)},
		{name: "bad override", podName: "web", spec: v1.PodSpec{HostnameOverride: ptr.To("Not_Valid")}, errHas: "not a valid DNS subdomain"},
		{name: "FQDN too long", podName: "web", spec: v1.PodSpec{Hostname: strings.Repeat("h", 45), Subdomain: "s", SetHostnameAsFQDN: ptr.To(true)},
			errHas: "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.podName, Namespace: "ns"}, Spec: tc.spec}
			h, d, err := podHostnameAndDomain(pod, "cluster.local")
			var k string
			if err == nil {
				k, err = kernelHostname(pod, h, d)
			}
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err %v, want one with %q", err, tc.errHas)
				}
				return
			}
			if err != nil || h != tc.wantHost || d != tc.wantDom || k != tc.wantKernel {
				t.Fatalf("got %q %q %q %v, want %q %q %q", h, d, k, err, tc.wantHost, tc.wantDom, tc.wantKernel)
			}
		})
	}
}

func TestWriteHostsFile(t *testing.T) {
	dir := t.TempDir()
	aliases := []v1.HostAlias{{IP: "123.45.67.89", Hostnames: []string{"foo", "bar"}}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: v1.PodSpec{Hostname: "h", Subdomain: "s", HostAliases: aliases}}
	path, err := writeHostsFile(dir, pod, []string{"10.0.0.5", "fd00::5"}, "example.org")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# Kubernetes-managed hosts file.\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\n" +
		"fe00::0\tip6-mcastprefix\n" +
		"fe00::1\tip6-allnodes\n" +
		"fe00::2\tip6-allrouters\n" +
		"10.0.0.5\th.s.ns.svc.example.org\th\n" +
		"fd00::5\th.s.ns.svc.example.org\th\n" +
		"\n# Entries added by HostAliases.\n" +
		"123.45.67.89\tfoo\tbar\n"
	if string(got) != want {
		t.Errorf("hosts file:\n%s\nwant:\n%s", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 || filepath.Dir(path) != dir {
		t.Errorf("hosts file %s: %v %v", path, fi.Mode(), err)
	}

	// A host-network pod: the node's file, then its aliases.
	node := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(node, []byte("127.0.0.1\tlocalhost\n192.0.2.1\tnode\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := nodeHostsFile
	nodeHostsFile = node
	t.Cleanup(func() { nodeHostsFile = old })
	pod.Spec.HostNetwork = true
	if path, err = writeHostsFile(dir, pod, []string{"192.0.2.1"}, "example.org"); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	want = "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n192.0.2.1\tnode\n" +
		"\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\n"
	if string(got) != want {
		t.Errorf("host-network hosts file:\n%s\nwant:\n%s", got, want)
	}
}

func TestContainerConfigHostsMount(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u"}}
	hostsMounts := func(c *v1.Container, vols map[string]volume) []string {
		cfg, err := makeContainerConfig(pod, startSpec{c: c, volumes: vols, hostsFile: "/pods/u/etc-hosts"})
		if err != nil {
			t.Fatal(err)
		}
		var hosts []string
		for _, m := range cfg.Mounts {
			if m.ContainerPath == etcHostsPath {
				hosts = append(hosts, m.HostPath)
			}
		}
		return hosts
	}
	if got := hostsMounts(&v1.Container{Name: "c"}, nil); len(got) != 1 || got[0] != "/pods/u/etc-hosts" {
		t.Errorf("/etc/hosts mounts %v, want the pod's hosts file", got)
	}
	own := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: etcHostsPath}}}
	if got := hostsMounts(own, map[string]volume{"v": {hostPath: "/vol/hosts"}}); len(got) != 1 || got[0] != "/vol/hosts" {
		t.Errorf("/etc/hosts mounts %v, want only the container's own volume", got)
	}
}
