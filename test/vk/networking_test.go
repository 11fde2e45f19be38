package vk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cri-compose/cri-compose/test/suite"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// Cluster networking: with VK_NETWORKING=1 (make test-networking),
// TestMain sets the suite's node up as a node of a cluster with a network,
// built from the parts clusters run and nothing of our own:
//   - the API server on the machine's own address (a pod and the second
//     host reach it there), advertised as the `kubernetes` Service's
//     endpoint, with a service range;
//   - kube-controller-manager allocating each Node's spec.podCIDR from the
//     cluster CIDR (vk-cri hands it to cri-compose, whose pod network then
//     takes it) and running the endpoint slice controllers; kube-scheduler;
//   - on each Docker host: flanneld (--kube-subnet-mgr, VXLAN) for pod to
//     pod across hosts, and kube-proxy (nftables) for Services;
//   - cri-compose with the engine's masquerading off (flanneld masquerades
//     only what leaves the cluster CIDR) and the overlay's MTU.
//
// TestNetworking (networking_flow_test.go) adds the second host, CoreDNS,
// and checks what a cluster's user expects.
var networking = os.Getenv("VK_NETWORKING") != "" || networkConformance

// networkConformance (make conformance-networking) runs, after
// TestNetworking's own checks, the e2e suite's [sig-network] [Conformance]
// specs on the same two-host cluster (CONFORMANCE_NETWORKING_FLAGS adds
// e2e.test flags, as CONFORMANCE_NODE_FLAGS does for node conformance).
var networkConformance = os.Getenv("VK_NETWORK_CONFORMANCE") != ""

const (
	networkConformanceFocus = `\[sig-network\].*\[Conformance\]`
	networkConformanceSkip  = `\[Serial\]|\[Slow\]|\[Flaky\]|\[Disruptive\]`
)

const (
	clusterCIDR   = "10.244.0.0/16"
	serviceCIDR   = "10.96.0.0/16"
	clusterDNSIP  = "10.96.0.10"
	clusterDomain = "cluster.local"
	// overlayMTU is a pod's MTU under flannel's VXLAN on a 1500-byte
	// link: VXLAN takes 50 bytes of each packet (flanneld's FLANNEL_MTU).
	overlayMTU = 1450
)

var (
	// machineIP is the machine's address (its default route's source): the
	// API server's, and the suite's node's InternalIP.
	machineIP                             string
	kubeProxyBin, flanneldBin, corednsBin string
	corednsVersion                        string
)

// primaryIP is the source address of the machine's default route.
func primaryIP() (string, error) {
	// No packet is sent: a UDP "connection" only picks the route.
	c, err := net.Dial("udp4", "203.0.113.1:9")
	if err != nil {
		return "", fmt.Errorf("the machine's address (its default route's source): %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// networkTools builds (or finds in the tool cache) kube-proxy (with the
// control plane's module), flanneld and CoreDNS (tools/network's).
func networkTools(ctx context.Context, toolsDir string) (took time.Duration, err error) {
	p, t, err := kubeBinary(ctx, toolsDir, "kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy")
	if err != nil {
		return took, err
	}
	kubeProxyBin, took = p, took+t
	netDir := filepath.Join(toolsDir, "network")
	fv, err := toolcache.ModuleVersion(ctx, netDir, "github.com/flannel-io/flannel")
	if err != nil {
		return took, err
	}
	// cgo: flannel's UDP backend is C; the binary runs on the host.
	if p, t, err = toolcache.Cached(ctx, netDir, "flanneld", fv, "github.com/flannel-io/flannel",
		"-trimpath", "-ldflags=-s -w -X github.com/flannel-io/flannel/pkg/version.Version="+fv); err != nil {
		return took, err
	}
	flanneldBin, took = p, took+t
	if corednsVersion, err = toolcache.ModuleVersion(ctx, netDir, "github.com/coredns/coredns"); err != nil {
		return took, err
	}
	// Static: it runs in an image of its own, as upstream's.
	if p, t, err = toolcache.CachedEnv(ctx, []string{"CGO_ENABLED=0"}, netDir, "coredns", corednsVersion,
		"github.com/coredns/coredns", "-trimpath", "-ldflags=-s -w"); err != nil {
		return took, err
	}
	corednsBin, took = p, took+t
	return took, nil
}

// clusterAPIArgs are the API server's flags for a cluster with a network:
// envtest's advertise 127.0.0.1 and no endpoint reconciler, so the
// `kubernetes` Service would lead nowhere from a pod.
func clusterAPIArgs() map[string]string {
	return map[string]string{
		"advertise-address":        machineIP,
		"endpoint-reconciler-type": "lease",
		"service-cluster-ip-range": serviceCIDR,
	}
}

// clusterControllerArgs are kube-controller-manager's flags for it: node
// IPAM gives each Node a /24 of the cluster CIDR.
func clusterControllerArgs() []string {
	return []string{"--allocate-node-cidrs", "--cluster-cidr", clusterCIDR, "--node-cidr-mask-size=24",
		"--service-cluster-ip-range", serviceCIDR}
}

// flannelBackend is flannel's backend: vxlan, or VK_FLANNEL_BACKEND
// (host-gw: routes through the other host's address on the shared link,
// no encapsulation).
func flannelBackend() string {
	if b := os.Getenv("VK_FLANNEL_BACKEND"); b != "" {
		return b
	}
	return "vxlan"
}

// podMTU is the pods' MTU for the backend: VXLAN's overhead, or none.
func podMTU() int {
	if flannelBackend() == "vxlan" {
		return overlayMTU
	}
	return 1500
}

// netHost is one Docker host's place in the cluster network: its node,
// the network namespace its daemons run in ("" for the machine's), the
// interface to the other hosts, and where its daemons keep their files.
type netHost struct {
	node  string
	netns string
	iface string
	dir   string
}

// command runs bin in the host's network namespace.
func (h netHost) command(bin string, args ...string) (string, []string) {
	if h.netns == "" {
		return bin, args
	}
	return "nsenter", append([]string{"--net=" + h.netns, bin}, args...)
}

// process is a suite.Process of bin in the host's namespace.
func (h netHost) process(name, bin string, env []string, args ...string) *suite.Process {
	b, a := h.command(bin, args...)
	return &suite.Process{Name: name, Bin: b, Args: a, Env: env, Dir: h.dir, OwnGroup: true}
}

// run runs a command in the host's namespace and returns its output.
func (h netHost) run(bin string, args ...string) (string, error) {
	b, a := h.command(bin, args...)
	out, err := exec.Command(b, a...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// netDaemons are a host's flanneld and kube-proxy.
type netDaemons struct {
	flanneld, kubeProxy *suite.Process
}

// flannelRBAC is what flanneld's --kube-subnet-mgr needs (flannel's own
// manifest's ClusterRole): to read Nodes, and to annotate its own with its
// VXLAN endpoint and mark its network available.
func flannelRBAC(ctx context.Context) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "flannel"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "flannel"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "flannel"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "flannel"}},
	}, metav1.CreateOptions{})
	return err
}

// userKubeconfig writes a kubeconfig for user (in groups) to dir.
func userKubeconfig(dir, user string, groups ...string) (string, error) {
	u, err := env.AddUser(envtest.User{Name: user, Groups: groups}, &rest.Config{})
	if err != nil {
		return "", err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig-"+strings.ReplaceAll(user, ":", "-"))
	return path, os.WriteFile(path, b, 0o600)
}

// startNetDaemons starts flanneld and kube-proxy for host h, and registers
// their stop and the removal of what they leave in the host's network
// (flannel's VXLAN link and iptables chains; kube-proxy's --cleanup).
func startNetDaemons(h netHost, deferred func(func())) (*netDaemons, error) {
	if err := os.MkdirAll(h.dir, 0o755); err != nil {
		return nil, err
	}
	netConf := filepath.Join(h.dir, "net-conf.json")
	conf, _ := json.Marshal(map[string]any{"Network": clusterCIDR, "Backend": map[string]string{"Type": flannelBackend()}})
	if err := os.WriteFile(netConf, conf, 0o644); err != nil {
		return nil, err
	}
	flannelKC, err := userKubeconfig(h.dir, "flannel")
	if err != nil {
		return nil, err
	}
	proxyKC, err := userKubeconfig(h.dir, "system:kube-proxy")
	if err != nil {
		return nil, err
	}
	// Ports of their own (in the machine's namespace, beside anything a
	// kubelet of another test would listen on).
	ports := [2]int{}
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	d := &netDaemons{
		flanneld: h.process("flanneld", flanneldBin, []string{"NODE_NAME=" + h.node},
			"--kube-subnet-mgr", "--kubeconfig-file", flannelKC, "--iface", h.iface, "--ip-masq",
			"--net-config-path", netConf, "--subnet-file", filepath.Join(h.dir, "subnet.env"), "-v=1"),
		kubeProxy: h.process("kube-proxy", kubeProxyBin, nil,
			"--kubeconfig", proxyKC, "--hostname-override", h.node, "--proxy-mode", "nftables",
			"--cluster-cidr", clusterCIDR, "--nodeport-addresses", "primary",
			"--healthz-bind-address", "127.0.0.1:"+strconv.Itoa(ports[0]), "--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(ports[1]),
			// The conntrack table's size and timeouts are the host's
			// (and read-only in a network namespace of its own).
			"--conntrack-max-per-core=0", "--conntrack-min=0",
			"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0", "-v=2"),
	}
	deferred(func() {
		_, _ = d.kubeProxy.Stop(syscall.SIGTERM)
		// Its nftables mode keeps everything in two tables of its own.
		// (kube-proxy --cleanup would also list iptables-legacy's tables,
		// which makes the kernel create them.)
		for _, family := range []string{"ip", "ip6"} {
			if out, err := h.run("nft", "delete", "table", family, "kube-proxy"); err != nil && !strings.Contains(out, "No such file") {
				fmt.Fprintf(os.Stderr, "vk e2e: kube-proxy's table on %s: %v\n", h.node, err)
			}
		}
		_, _ = d.flanneld.Stop(syscall.SIGTERM)
		removeFlannel(h)
	})
	if err := d.flanneld.Start(); err != nil {
		return nil, err
	}
	if err := d.kubeProxy.Start(); err != nil {
		return nil, err
	}
	return d, nil
}

// removeFlannel removes what flanneld leaves on a host when it stops (it
// keeps them on purpose, so that a restart breaks no path): its VXLAN
// link, with the routes through it, and its iptables chains.
func removeFlannel(h netHost) {
	if out, err := h.run("ip", "link", "del", "flannel.1"); err != nil && !strings.Contains(out, "Cannot find") {
		fmt.Fprintf(os.Stderr, "vk e2e: %v\n", err)
	}
	for _, table := range []string{"filter", "nat"} {
		rules, err := h.run("iptables", "-t", table, "-S")
		if err != nil {
			continue
		}
		var chains []string
		for _, line := range strings.Split(rules, "\n") {
			switch {
			case strings.HasPrefix(line, "-N FLANNEL"):
				chains = append(chains, strings.TrimPrefix(line, "-N "))
			case strings.HasPrefix(line, "-A ") && strings.Contains(line, "-j FLANNEL") && !strings.HasPrefix(line, "-A FLANNEL"):
				// iptables -S quotes as a shell would read it.
				_, _ = h.run("sh", "-c", "iptables -t "+table+" -D "+strings.TrimPrefix(line, "-A "))
			}
		}
		for _, c := range chains {
			_, _ = h.run("iptables", "-t", table, "-F", c)
			_, _ = h.run("iptables", "-t", table, "-X", c)
		}
	}
}

// alive fails with the daemon's log if it has exited.
func (d *netDaemons) alive() error {
	for _, p := range []*suite.Process{d.flanneld, d.kubeProxy} {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited:\n%s", p.Name, p.LogTail(20))
		default:
		}
	}
	return nil
}

// waitNodeNetwork waits until a node has its pod CIDR and flanneld's
// annotations (its VXLAN endpoint), and returns the pod CIDR.
func waitNodeNetwork(node string, d time.Duration) (string, error) {
	var cidr string
	err := suite.Poll("node "+node+"'s pod CIDR and flannel's annotations", d, func() (bool, string) {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cidr = n.Spec.PodCIDR
		ip := n.Annotations["flannel.alpha.coreos.com/public-ip"]
		return cidr != "" && ip != "", fmt.Sprintf("podCIDR %q, flannel public-ip %q", cidr, ip)
	})
	return cidr, err
}

// tailBoth is the tail of two logs, for a failure's message.
func tailBoth(a, b *suite.Process) string {
	var buf bytes.Buffer
	for _, p := range []*suite.Process{a, b} {
		fmt.Fprintf(&buf, "--- %s (%s)\n%s\n", p.Name, p.LogPath(), p.LogTail(25))
	}
	return buf.String()
}
