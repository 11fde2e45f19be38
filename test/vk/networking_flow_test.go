package vk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"

	"github.com/cri-compose/cri-compose/test/images/kubee2e"
	"github.com/cri-compose/cri-compose/test/privengine"
	"github.com/cri-compose/cri-compose/test/suite"
)

// clusterNode is one Docker host of the two-host cluster: its node, its
// runtime (for exec into its pods), its engine and its network daemons.
type clusterNode struct {
	netHost
	ip      string // the node's InternalIP
	cri     internalapi.RuntimeService
	network string // cri-compose's pod network
	daemons *netDaemons
}

// TestNetworking: two Docker hosts as two virtual nodes of one cluster
// (the machine's engine with the suite's node, and a private engine in a
// network namespace of its own, linked to the machine by a veth pair), each
// with cri-compose, vk-cri, flanneld and kube-proxy; CoreDNS as a
// Deployment behind the kube-dns Service. A Deployment of agnhost's
// netexec (3 replicas spread over both nodes) behind a NodePort Service,
// and a client pod on each node:
//   - every client reaches every replica by its pod IP, and the replica
//     sees the client's own pod IP (nothing masquerades pod to pod);
//   - what leaves the cluster CIDR is masqueraded (a server on the
//     machine sees the second host's address);
//   - the Service by name (cluster DNS, search path) and by ClusterIP
//     reaches every replica, from either node;
//   - kubernetes.default reaches the API server through its ClusterIP;
//   - the host reaches the Service's ClusterIP too;
//   - the NodePort answers on each host's address;
//   - scaled to 1 and back to 3, the clients reach what is there.
func TestNetworking(t *testing.T) {
	if !networking {
		t.Skip("cluster networking runs under VK_NETWORKING=1 (make test-networking)")
	}
	need(t)
	ctx := context.Background()
	start := time.Now()
	if err := flannelRBAC(ctx); err != nil {
		t.Fatal(err)
	}
	a, b := clusterHosts(t)
	for _, n := range []*clusterNode{a, b} {
		d, err := startNetDaemons(n.netHost, t.Cleanup)
		if err != nil {
			t.Fatal(err)
		}
		n.daemons = d
	}
	for _, n := range []*clusterNode{a, b} {
		cidr, err := waitNodeNetwork(n.node, 2*time.Minute)
		if err != nil {
			t.Fatalf("%v\n%s", err, tailBoth(n.daemons.flanneld, n.daemons.kubeProxy))
		}
		if err := n.daemons.alive(); err != nil {
			t.Fatalf("%s: %v", n.node, err)
		}
		waitPodNetwork(t, n, cidr)
	}
	t.Logf("two nodes with their pod CIDRs and flannel's %s in %v", flannelBackend(), time.Since(start).Round(time.Millisecond))
	deployCoreDNS(t)
	t.Logf("cluster DNS up %v after the start", time.Since(start).Round(time.Millisecond))

	ns := namespace(t)
	web := deployWeb(t, ns, 3)
	clients := map[string]*v1.Pod{}
	for _, n := range []*clusterNode{a, b} {
		clients[n.node] = clientPod(t, ns, "client-"+strconv.Itoa(len(clients)), n.node)
	}
	nodes := map[string]*clusterNode{a.node: a, b.node: b}
	webPods := waitReplicas(t, ns, 3)
	if on := podNodes(webPods); len(on) != 2 {
		t.Fatalf("the replicas are not spread over both nodes: %v", on)
	}

	t.Run("podToPod", func(t *testing.T) {
		for node, c := range clients {
			mtu := strings.TrimSpace(execOnNode(t, nodes[node], c, 10*time.Second, "cat", "/sys/class/net/eth0/mtu"))
			if mtu != strconv.Itoa(podMTU()) {
				t.Errorf("%s: eth0's MTU is %s, want the overlay's %d", c.Name, mtu, podMTU())
			}
			for _, w := range webPods {
				base := "http://" + net.JoinHostPort(w.Status.PodIP, "8080")
				if got := strings.TrimSpace(execOnNode(t, nodes[node], c, 20*time.Second, "wget", "-q", "-T", "5", "-O-", base+"/hostname")); got != w.Name {
					t.Errorf("%s (%s) to %s by IP: %q, want %s", c.Name, node, w.Name, got, w.Name)
				}
				seen := strings.TrimSpace(execOnNode(t, nodes[node], c, 20*time.Second, "wget", "-q", "-T", "5", "-O-", base+"/clientip"))
				if host, _, _ := net.SplitHostPort(seen); host != c.Status.PodIP {
					t.Errorf("%s (%s, pod IP %s) to %s on %s: seen from %s, want its own pod IP", c.Name, node, c.Status.PodIP, w.Name, w.Spec.NodeName, seen)
				}
			}
		}
	})

	t.Run("masqueradeOutOfCluster", func(t *testing.T) {
		// A server on the machine, outside the cluster CIDR: the second
		// host's client arrives from its host's address.
		l, err := net.Listen("tcp", net.JoinHostPort(machineIP, "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.RemoteAddr) }), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
		seen := strings.TrimSpace(execOnNode(t, b, clients[b.node], 20*time.Second, "wget", "-q", "-T", "5", "-O-", "http://"+l.Addr().String()+"/"))
		if host, _, _ := net.SplitHostPort(seen); host != b.ip {
			t.Errorf("a pod on %s reaching %s outside the cluster arrives from %s, want its host's %s", b.node, l.Addr(), seen, b.ip)
		}
	})

	svc, err := client.CoreV1().Services(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("serviceByNameAndClusterIP", func(t *testing.T) {
		want := podNames(webPods)
		for node, c := range clients {
			resolv := execOnNode(t, nodes[node], c, 10*time.Second, "cat", "/etc/resolv.conf")
			for _, line := range []string{"nameserver " + clusterDNSIP, "search " + ns + ".svc." + clusterDomain + " svc." + clusterDomain + " " + clusterDomain, "options ndots:5"} {
				if !strings.Contains(resolv, line) {
					t.Errorf("%s's resolv.conf lacks %q:\n%s", c.Name, line, resolv)
				}
			}
			lookup := execOnNode(t, nodes[node], c, 20*time.Second, "nslookup", "web."+ns+".svc."+clusterDomain)
			if !strings.Contains(lookup, svc.Spec.ClusterIP) {
				t.Errorf("%s: web.%s.svc.%s does not resolve to %s:\n%s", c.Name, ns, clusterDomain, svc.Spec.ClusterIP, lookup)
			}
			for _, url := range []string{"http://web/hostname", "http://web." + ns + ".svc." + clusterDomain + "/hostname", "http://" + svc.Spec.ClusterIP + "/hostname"} {
				// The replicas are Ready in the API; kube-proxy on each
				// host follows their endpoint slices a moment later.
				waitFor(t, fmt.Sprintf("%s on %s to reach every replica through %s", c.Name, node, url), 30*time.Second, func() (bool, string) {
					got := reached(t, nodes[node], c, url, 30)
					return equalSets(got, want), fmt.Sprintf("reached %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
				})
			}
		}
	})

	t.Run("kubernetesDefault", func(t *testing.T) {
		for node, c := range clients {
			// agnhost connect: a TCP connection, exit status 0 if made.
			execOnNode(t, nodes[node], c, 20*time.Second, "/agnhost", "connect", "kubernetes.default:443", "--timeout=5s")
		}
	})

	t.Run("clusterIPFromHost", func(t *testing.T) {
		// From the machine itself (this test's own process): kube-proxy
		// serves the host's own traffic to a ClusterIP too.
		want := podNames(webPods)
		got := map[string]bool{}
		for range 30 {
			name, err := httpGet("http://" + svc.Spec.ClusterIP + "/hostname")
			if err != nil {
				t.Fatalf("ClusterIP from the host: %v", err)
			}
			got[strings.TrimSpace(string(name))] = true
		}
		if !equalSets(got, want) {
			t.Errorf("the ClusterIP from the host reached %v, want every replica %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	})

	t.Run("nodePort", func(t *testing.T) {
		port := svc.Spec.Ports[0].NodePort
		want := podNames(webPods)
		for _, n := range []*clusterNode{a, b} {
			got := map[string]bool{}
			url := "http://" + net.JoinHostPort(n.ip, strconv.Itoa(int(port))) + "/hostname"
			for range 30 {
				name, err := httpGet(url)
				if err != nil {
					t.Fatalf("NodePort on %s: %v", n.node, err)
				}
				got[strings.TrimSpace(string(name))] = true
			}
			if !equalSets(got, want) {
				t.Errorf("NodePort %s reached %v, want every replica %v", url, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
		}
	})

	t.Run("daemonRestarts", func(t *testing.T) {
		// From the client on the machine's node, ten times a second: a
		// replica on the other node by pod IP (flannel's path), and the
		// Service by ClusterIP (kube-proxy's), while flanneld here and
		// kube-proxy there are restarted.
		var far *v1.Pod
		for i := range webPods {
			if webPods[i].Spec.NodeName == b.node {
				far = &webPods[i]
			}
		}
		if far == nil {
			t.Fatal("no replica on " + b.node)
		}
		c := clients[a.node]
		urls := []string{"http://" + net.JoinHostPort(far.Status.PodIP, "8080") + "/hostname", "http://" + svc.Spec.ClusterIP + "/hostname"}
		probe := `while [ ! -e /tmp/stop ]; do for u in ` + strings.Join(urls, " ") + `; do
  read up _ < /proc/uptime; if wget -q -T 1 -O /dev/null "$u"; then echo "$up ok $u"; else echo "$up fail $u"; fi
done; usleep 100000; done`
		execOnNode(t, a, c, 10*time.Second, "sh", "-c", "rm -f /tmp/stop; nohup sh -c '"+probe+"' >/tmp/probe.log 2>&1 </dev/null &")
		// moreProbes waits for n more lines of the probe's log.
		moreProbes := func(n int) {
			t.Helper()
			count := func() int {
				out := execOnNode(t, a, c, 10*time.Second, "sh", "-c", "wc -l < /tmp/probe.log")
				k, _ := strconv.Atoi(strings.TrimSpace(out))
				return k
			}
			want := count() + n
			waitFor(t, fmt.Sprintf("%d more probes", n), time.Minute, func() (bool, string) {
				k := count()
				return k >= want, fmt.Sprintf("%d lines, want %d", k, want)
			})
		}
		for _, r := range []struct {
			what string
			p    *suite.Process
		}{{"flanneld on " + a.node, a.daemons.flanneld}, {"kube-proxy on " + b.node, b.daemons.kubeProxy}} {
			moreProbes(20)
			start := time.Now()
			if err := r.p.Restart(); err != nil {
				t.Fatalf("restart %s: %v", r.what, err)
			}
			t.Logf("%s restarted in %v", r.what, time.Since(start).Round(time.Millisecond))
		}
		moreProbes(60) // a few seconds after the last restart
		execOnNode(t, a, c, 10*time.Second, "touch", "/tmp/stop")
		log := execOnNode(t, a, c, 10*time.Second, "cat", "/tmp/probe.log")
		for _, u := range urls {
			tries, fails, gap := probeGaps(log, u)
			t.Logf("%s: %d requests during the restarts, %d failed, longest break %.2f s", u, tries, fails, gap)
			if tries < 50 {
				t.Errorf("%s: only %d requests were made:\n%s", u, tries, log)
			}
			if gap > maxRestartBreak.Seconds() {
				t.Errorf("%s: a break of %.2f s, more than %v:\n%s", u, gap, maxRestartBreak, log)
			}
		}
	})

	t.Run("scale", func(t *testing.T) {
		for _, replicas := range []int32{1, 3} {
			scale(t, ns, web, replicas)
			pods := waitReplicas(t, ns, int(replicas))
			want := podNames(pods)
			for node, c := range clients {
				// kube-proxy follows the endpoint slices within a moment.
				waitFor(t, fmt.Sprintf("%s to reach the %d replicas through the Service", c.Name, replicas), time.Minute, func() (bool, string) {
					got := reached(t, nodes[node], c, "http://web/hostname", 20)
					return equalSets(got, want), fmt.Sprintf("reached %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
				})
			}
		}
	})

	if networkConformance && !t.Failed() {
		t.Run("conformance", func(t *testing.T) {
			runE2E(t, "conformance-networking", "[sig-network] conformance (vk-cri on cri-compose, two Docker hosts)",
				networkConformanceFocus, networkConformanceSkip, strings.Fields(os.Getenv("CONFORMANCE_NETWORKING_FLAGS")))
		})
	}
}

// maxRestartBreak bounds how long a restart of flanneld or kube-proxy may
// break an established path: flanneld leaves its link and routes in place
// when it stops, and kube-proxy's nftables rules stay until it replaces
// them, so neither should break one at all.
const maxRestartBreak = 2 * time.Second

// probeGaps reads the probe log's lines for url ("UPTIME ok|fail URL")
// and returns how many requests were made, how many failed, and the
// longest time from the last success before a failure to the next success.
func probeGaps(log, url string) (tries, fails int, longest float64) {
	lastOK, failing := -1.0, false
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != url {
			continue
		}
		at, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		tries++
		switch f[1] {
		case "ok":
			if failing && lastOK >= 0 {
				longest = max(longest, at-lastOK)
			}
			lastOK, failing = at, false
		default:
			fails++
			failing = true
		}
	}
	if failing && lastOK >= 0 { // still failing at the end
		longest = max(longest, 1e9)
	}
	return tries, fails, longest
}

// clusterHosts makes the second host (a private engine linked to the
// machine) with its cri-compose and vk-cri, and returns both hosts.
func clusterHosts(t *testing.T) (a, b *clusterNode) {
	t.Helper()
	// The e2e images' registry, at the machine's address (plain HTTP,
	// which an engine takes only from loopback unless told).
	mirror := net.JoinHostPort(machineIP, e2eRegistry.Port())
	pe := privengine.Start(t, privengine.Options{Link: true, Args: func(*privengine.Engine) []string {
		// A Docker host as users run it: the engine's own iptables
		// rules (a FORWARD policy of DROP among them) and forwarding.
		return []string{"--iptables=true", "--ip-forward=true", "--insecure-registry", mirror}
	}})
	hostLink, nsLink := pe.Links()
	dir := filepath.Join(runDir, "net-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	a = &clusterNode{
		netHost: netHost{node: nodeName, iface: hostLink, dir: filepath.Join(dir, "a")},
		ip:      machineIP, cri: cri, network: "vke2e-" + runID,
	}
	b = &clusterNode{
		netHost: netHost{node: "vk-e2e-net-" + runID, netns: pe.NetNS(), iface: nsLink, dir: filepath.Join(dir, "b")},
		ip:      pe.LinkIP(), network: "vke2e-net-" + runID,
	}
	for _, d := range []string{a.dir, b.dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The second host reaches the API server (on the machine's address)
	// and the rest of the world through the machine.
	if _, err := b.run("ip", "route", "replace", "default", "via", pe.HostLinkIP()); err != nil {
		t.Fatal(err)
	}
	criSock := filepath.Join(b.dir, "cri.sock")
	criProc := b.process("cri-compose", filepath.Join(runDir, "bin", "cri-compose"), nil,
		"--listen", "unix://"+criSock, "--state-dir", filepath.Join(b.dir, "cri-state"),
		"--docker-host", pe.Host(), "--network", b.network,
		"--ip-masq=false", "--network-mtu="+strconv.Itoa(podMTU()),
		"--registry-mirror", "registry.k8s.io=http://"+mirror,
		"--stream-address", "127.0.0.1:0", "-v=2")
	if err := criProc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = criProc.Stop(syscall.SIGTERM) })
	if err := suite.WaitSocket(criSock, time.Minute, criProc.Exited()); err != nil {
		t.Fatalf("second host's cri-compose: %v\n%s", err, criProc.LogTail(30))
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	var err error
	if b.cri, err = remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + criSock).
		WithConnectionTimeout(time.Minute).WithUseStreaming(false).Build(dctx); err != nil {
		t.Fatal(err)
	}

	// kubelet's own port: the host's namespace is the node's alone (the
	// e2e framework's log dumps assume it).
	port := 10250
	vkProc := b.process("vk-cri", filepath.Join(runDir, "bin", "vk-cri"), nil,
		"--kubeconfig", mustNodeKubeconfig(t, b.node), "--nodename", b.node,
		"--cri-endpoint", "unix://"+criSock,
		"--listen-address", net.JoinHostPort(b.ip, strconv.Itoa(port)),
		"--client-ca-file", kubeletCACert, "--node-ip", b.ip,
		"--state-dir", filepath.Join(b.dir, "vk-state"), "--pods", "110", "--register-with-taints=",
		"--cluster-dns", clusterDNSIP, "--cluster-domain", clusterDomain, "-v=3")
	if err := vkProc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteNodePods(b.node)
		_, _ = vkProc.Stop(syscall.SIGTERM)
		checkNoRace(t, "vk-cri (second host)", vkProc.LogPath())
		if t.Failed() {
			t.Logf("second host's logs:\n%s", tailBoth(vkProc, criProc))
		}
	})
	if err := waitNodeReady(b.node, 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, tailBoth(vkProc, criProc))
	}
	return a, b
}

// waitPodNetwork waits until the node's cri-compose has its pod network
// on the node's pod CIDR (vk-cri hands it over at its next status sync),
// as its verbose Status says: the network itself may be made only with
// the first pod.
func waitPodNetwork(t *testing.T, n *clusterNode, cidr string) {
	t.Helper()
	waitFor(t, n.node+"'s pod network on "+cidr, time.Minute, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := n.cri.Status(ctx, true)
		if err != nil {
			return false, err.Error()
		}
		var info struct {
			PodSubnets []string `json:"podSubnets"`
		}
		if err := json.Unmarshal([]byte(st.GetInfo()["config"]), &info); err != nil {
			return false, err.Error()
		}
		return slices.Contains(info.PodSubnets, cidr), fmt.Sprint("pod subnets ", info.PodSubnets)
	})
}

// deployCoreDNS runs CoreDNS as kubeadm does (a Deployment in kube-system
// behind the kube-dns Service, with its RBAC), and waits until it answers.
// It reaches the API server at its address, with its service account's
// token and CA: the API server's certificate (envtest's) does not name the
// `kubernetes` Service's ClusterIP.
func deployCoreDNS(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	const ns = "kube-system"
	api := env.ControlPlane.APIServer.SecureServing
	corefile := `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes ` + clusterDomain + ` in-addr.arpa ip6.arpa {
        kubeconfig /etc/coredns/kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
    loadbalance
}
`
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: https://` + net.JoinHostPort(api.Address, api.Port) + `
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
users:
- name: coredns
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
contexts:
- name: coredns
  context: {cluster: cluster, user: coredns}
current-context: coredns
`
	labels := map[string]string{"k8s-app": "kube-dns"}
	one := int32(1)
	_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coredns"}}, metav1.CreateOptions{})
	mustCreate(t, "coredns's service account", 0, err)
	_, err = client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}, metav1.CreateOptions{})
	mustCreate(t, "coredns's role", 0, err)
	_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:coredns"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "coredns", Namespace: ns}},
	}, metav1.CreateOptions{})
	mustCreate(t, "coredns's role binding", 0, err)
	_, err = client.CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns"},
		Data:       map[string]string{"Corefile": corefile, "kubeconfig": kubeconfig},
	}, metav1.CreateOptions{})
	mustCreate(t, "coredns's config", 0, err)
	_, err = client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: labels},
		Spec: v1.ServiceSpec{
			Selector: labels, ClusterIP: clusterDNSIP,
			Ports: []v1.ServicePort{
				{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			},
		},
	}, metav1.CreateOptions{})
	mustCreate(t, "the kube-dns Service", 0, err)
	_, err = client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "coredns", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					ServiceAccountName: "coredns",
					DNSPolicy:          v1.DNSDefault,
					Containers: []v1.Container{{
						Name: "coredns", Image: kubee2e.CoreDNSImage(corednsVersion), ImagePullPolicy: v1.PullIfNotPresent,
						Args:         []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []v1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []v1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: v1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: v1.ProtocolTCP},
						},
						ReadinessProbe: &v1.Probe{
							ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
							PeriodSeconds: 2,
						},
					}},
					Volumes: []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{
						ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "coredns"}},
					}}},
				},
			},
		},
	}, metav1.CreateOptions{})
	mustCreate(t, "coredns's Deployment", 0, err)
	t.Cleanup(func() {
		ctx := context.Background()
		fg := metav1.DeletePropagationForeground
		_ = client.AppsV1().Deployments(ns).Delete(ctx, "coredns", metav1.DeleteOptions{PropagationPolicy: &fg})
		_ = client.CoreV1().Services(ns).Delete(ctx, "kube-dns", metav1.DeleteOptions{})
		_ = client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	})
	waitFor(t, "coredns Ready", 3*time.Minute, func() (bool, string) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
		if err != nil || len(pods.Items) == 0 {
			return false, fmt.Sprint("no pod yet ", err)
		}
		p := &pods.Items[0]
		return condition(p, v1.PodReady) == v1.ConditionTrue, podSummary(p)
	})
}

// deployWeb makes the Deployment "web" of agnhost's netexec (HTTP on 8080:
// /hostname, /clientip), its replicas spread over the nodes, behind the
// NodePort Service "web" on port 80.
func deployWeb(t *testing.T, ns string, replicas int32) *appsv1.Deployment {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d, err := client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					TopologySpreadConstraints: []v1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: v1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []v1.Container{{
						Name: "netexec", Image: kubee2e.Agnhost, ImagePullPolicy: v1.PullIfNotPresent,
						Args:  []string{"netexec", "--http-port=8080"},
						Ports: []v1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &v1.Probe{
							ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 2,
						},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	mustCreate(t, "the web Deployment", 0, err)
	// Before the nodes go: its ReplicaSet would make a deleted pod again.
	t.Cleanup(func() {
		fg := metav1.DeletePropagationForeground
		_ = client.AppsV1().Deployments(ns).Delete(context.Background(), "web", metav1.DeleteOptions{PropagationPolicy: &fg})
		deleteNodePods(nodeName)
	})
	_, err = client.CoreV1().Services(ns).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeNodePort, Selector: labels,
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	mustCreate(t, "the web Service", 0, err)
	return d
}

// clientPod runs agnhost (busybox's wget and nslookup beside it) on node.
func clientPod(t *testing.T, ns, name, node string) *v1.Pod {
	t.Helper()
	zero := int64(0)
	createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.PodSpec{
			NodeName: node, TerminationGracePeriodSeconds: &zero,
			Containers: []v1.Container{{Name: "client", Image: kubee2e.Agnhost, ImagePullPolicy: v1.PullIfNotPresent, Args: []string{"pause"}}},
		},
	})
	return waitRunning(t, ns, name)
}

// waitReplicas waits until the web Deployment has exactly n pods, all
// Running and Ready, and returns them.
func waitReplicas(t *testing.T, ns string, n int) []v1.Pod {
	t.Helper()
	var ready []v1.Pod
	waitFor(t, fmt.Sprintf("%d web replicas Ready", n), 3*time.Minute, func() (bool, string) {
		pods, err := client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		ready = ready[:0]
		var why []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && condition(&p, v1.PodReady) == v1.ConditionTrue {
				ready = append(ready, p)
			}
			why = append(why, podSummary(&p))
		}
		return len(ready) == n && len(pods.Items) == n, strings.Join(why, "; ")
	})
	return ready
}

func scale(t *testing.T, ns string, d *appsv1.Deployment, replicas int32) {
	t.Helper()
	s, err := client.AppsV1().Deployments(ns).GetScale(context.Background(), d.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := client.AppsV1().Deployments(ns).UpdateScale(context.Background(), d.Name, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// execOnNode runs cmd in the pod's first container through its node's
// CRI ExecSync, failing t on an error or a non-zero exit.
func execOnNode(t *testing.T, n *clusterNode, p *v1.Pod, timeout time.Duration, cmd ...string) string {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("no container in %s", podSummary(p))
	}
	_, id, _ := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	stdout, stderr, err := n.cri.ExecSync(ctx, id, cmd, timeout)
	if err != nil {
		t.Fatalf("exec %v in %s on %s: %v\nstdout %q\nstderr %q", cmd, p.Name, n.node, err, stdout, stderr)
	}
	return string(stdout)
}

// reached asks url n times from the client and returns the set of
// answers (netexec's /hostname: the replica's name). A request that fails
// adds nothing.
func reached(t *testing.T, n *clusterNode, c *v1.Pod, url string, times int) map[string]bool {
	t.Helper()
	script := fmt.Sprintf(`for i in $(seq %d); do wget -q -T 3 -O- %s; echo; done; true`, times, url)
	out := execOnNode(t, n, c, time.Duration(times)*4*time.Second, "sh", "-c", script)
	got := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			got[line] = true
		}
	}
	return got
}

func podNames(pods []v1.Pod) map[string]bool {
	m := map[string]bool{}
	for _, p := range pods {
		m[p.Name] = true
	}
	return m
}

func podNodes(pods []v1.Pod) map[string]int {
	m := map[string]int{}
	for _, p := range pods {
		m[p.Spec.NodeName]++
	}
	return m
}

func equalSets(a, b map[string]bool) bool { return maps.Equal(a, b) }
