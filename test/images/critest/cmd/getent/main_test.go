package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/test/images/critest/internal/dnstest"
)

const (
	ns      = "dns-1234"
	svcFQDN = "kubernetes.default.svc.cluster.local."
	podFQDN = "dns-querier-1.dns-test-service." + ns + ".svc.cluster.local"
	extName = "dns-test-service-3." + ns + ".svc.cluster.local."
	podConf = "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local\nnameserver 127.0.0.1\noptions ndots:5\n"
	// podHosts is the /etc/hosts the kubelet writes for a pod with a
	// hostname and a subdomain.
	podHosts = `# Kubernetes-managed hosts file.
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
fe00::0	ip6-mcastprefix
fe00::1	ip6-allnodes
fe00::2	ip6-allrouters
10.244.1.5	` + podFQDN + `	dns-querier-1
`
)

// cluster starts a server of an IPv4 cluster's records and makes conf and
// hosts getent's files, the server its nameservers' port.
func cluster(t *testing.T, conf, hosts string) *dnstest.Server {
	t.Helper()
	s := dnstest.Start(t,
		dnstest.A(svcFQDN, "10.96.0.1"),
		dnstest.PTR("1.0.96.10.in-addr.arpa.", svcFQDN),
		dnstest.CNAME(extName, "foo.example.com."),
		dnstest.A("foo.example.com.", "192.0.2.123"),
		dnstest.AAAA("v6.example.", "2001:db8::5"),
		dnstest.A("v6.example.", "192.0.2.5"),
	)
	dir := t.TempDir()
	for name, content := range map[string]string{"resolv.conf": conf, "hosts": hosts} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oldConf, oldHosts, oldPort, oldHostname := resolvConfPath, hostsPath, port, hostname
	resolvConfPath, hostsPath, port = filepath.Join(dir, "resolv.conf"), filepath.Join(dir, "hosts"), s.Port()
	hostname = func() (string, error) { return "dns-querier-1", nil }
	t.Cleanup(func() { resolvConfPath, hostsPath, port, hostname = oldConf, oldHosts, oldPort, oldHostname })
	return s
}

type result struct {
	code           int
	stdout, stderr string
}

func getent(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func asked(s *dnstest.Server) []string {
	var out []string
	for _, a := range s.Asked() {
		out = append(out, fmt.Sprintf("%s %s %d", a.Network, a.Name, a.Type))
	}
	return out
}

// TestHostsFile: createProbeCommand's `getent hosts NAME` for the pod's
// FQDN and hostname, answered from /etc/hosts after DNS has no AAAA for
// them; localhost is IPv6's first.
func TestHostsFile(t *testing.T) {
	line := "10.244.1.5      " + podFQDN + " dns-querier-1\n"
	for key, want := range map[string]string{
		"dns-querier-1":              line,
		podFQDN:                      line,
		"DNS-Querier-1":              line,
		"localhost":                  "::1             localhost ip6-localhost ip6-loopback\n",
		"ip6-loopback":               "::1             localhost ip6-localhost ip6-loopback\n",
		"10.244.1.5":                 line,
		"fe00::1":                    "fe00::1         ip6-allnodes\n",
		"dns-querier-1 ip6-localnet": "",
	} {
		cluster(t, podConf, podHosts)
		keys := strings.Fields(key)
		if len(keys) > 1 {
			want = line + "fe00::          ip6-localnet\n"
		}
		if r := getent(append([]string{"hosts"}, keys...)...); r.code != 0 || r.stdout != want || r.stderr != "" {
			t.Errorf("getent hosts %s: exit %d, stdout %q, stderr %q; want 0, %q", key, r.code, r.stdout, r.stderr, want)
		}
	}

	s := cluster(t, podConf, podHosts)
	getent("hosts", "dns-querier-1")
	want := []string{
		"udp dns-querier-1." + ns + ".svc.cluster.local. 28", "udp dns-querier-1.svc.cluster.local. 28",
		"udp dns-querier-1.cluster.local. 28", "udp dns-querier-1. 28",
	}
	if got := asked(s); !reflect.DeepEqual(got, want) {
		t.Errorf("asked %q, want %q (AAAA through the search list, then the file's IPv4)", got, want)
	}

	// Every line, without a key.
	cluster(t, podConf, podHosts)
	wantAll := "127.0.0.1       localhost\n::1             localhost ip6-localhost ip6-loopback\n" +
		"fe00::          ip6-localnet\nfe00::          ip6-mcastprefix\nfe00::1         ip6-allnodes\nfe00::2         ip6-allrouters\n" + line
	if r := getent("hosts"); r.code != 0 || r.stdout != wantAll {
		t.Errorf("getent hosts: exit %d, stdout %q, want %q", r.code, r.stdout, wantAll)
	}
}

// TestDNS: names that only DNS has, through the search list and ndots,
// AAAA before A.
func TestDNS(t *testing.T) {
	s := cluster(t, podConf, podHosts)
	if r := getent("hosts", "kubernetes.default"); r.code != 0 || r.stdout != "10.96.0.1       kubernetes.default.svc.cluster.local\n" {
		t.Errorf("kubernetes.default: exit %d, stdout %q", r.code, r.stdout)
	}
	want := []string{
		// AAAA: an empty answer moves on as NXDOMAIN does.
		"udp kubernetes.default." + ns + ".svc.cluster.local. 28", "udp kubernetes.default.svc.cluster.local. 28",
		"udp kubernetes.default.cluster.local. 28", "udp kubernetes.default. 28",
		"udp kubernetes.default." + ns + ".svc.cluster.local. 1", "udp kubernetes.default.svc.cluster.local. 1",
	}
	if got := asked(s); !reflect.DeepEqual(got, want) {
		t.Errorf("asked %q, want %q", got, want)
	}

	// At least ndots dots: the name as it is first.
	s = cluster(t, strings.Replace(podConf, "ndots:5", "ndots:2", 1), podHosts)
	if r := getent("hosts", "kubernetes.default.svc.cluster.local"); r.code != 0 || r.stdout != "10.96.0.1       kubernetes.default.svc.cluster.local\n" {
		t.Errorf("ndots:2: exit %d, stdout %q", r.code, r.stdout)
	}
	if got := asked(s); len(got) != 5 || got[0] != "udp "+svcFQDN+" 28" || got[4] != "udp "+svcFQDN+" 1" {
		t.Errorf("ndots:2: asked %q, want the name as it is first for AAAA and for A", got)
	}

	for key, want := range map[string]string{
		extName:       "192.0.2.123     foo.example.com " + strings.TrimSuffix(extName, ".") + "\n",
		"v6.example.": "2001:db8::5     v6.example\n",
		"10.96.0.1":   "10.96.0.1       kubernetes.default.svc.cluster.local\n",
	} {
		cluster(t, podConf, podHosts)
		if r := getent("hosts", key); r.code != 0 || r.stdout != want {
			t.Errorf("getent hosts %s: exit %d, stdout %q; want %q", key, r.code, r.stdout, want)
		}
	}
}

func TestNotFound(t *testing.T) {
	cluster(t, podConf, podHosts)
	if r := getent("hosts", "nothere"); r.code != 2 || r.stdout != "" {
		t.Errorf("nothere: exit %d, stdout %q; want 2 and nothing", r.code, r.stdout)
	}
	if r := getent("hosts", "nothere", "localhost"); r.code != 2 || !strings.HasPrefix(r.stdout, "::1 ") {
		t.Errorf("nothere localhost: exit %d, stdout %q; want 2 and localhost's line", r.code, r.stdout)
	}
	if r := getent("hosts", "192.0.2.99"); r.code != 2 || r.stdout != "" {
		t.Errorf("192.0.2.99: exit %d, stdout %q; want 2 and nothing", r.code, r.stdout)
	}

	// No server replies: not found after timeout × attempts for AAAA and A.
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cluster(t, "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n", "")
	port = uint16(silent.LocalAddr().(*net.UDPAddr).Port)
	start := time.Now()
	if r := getent("hosts", "kubernetes.default.svc.cluster.local."); r.code != 2 || time.Since(start) > 5*time.Second {
		t.Errorf("a silent server: exit %d after %v; want 2 after about 2s", r.code, time.Since(start))
	}
}

func TestUsage(t *testing.T) {
	cluster(t, podConf, podHosts)
	if r := getent("passwd", "root"); r.code != 1 || r.stderr != "Unknown database: passwd\n" {
		t.Errorf("passwd: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := getent(); r.code != 1 || r.stderr != "getent: wrong number of arguments\n" {
		t.Errorf("no database: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := getent("-i", "hosts", "localhost"); r.code != 0 {
		t.Errorf("-i hosts localhost: exit %d", r.code)
	}
}
