// Command vk-cri registers a virtual node in a Kubernetes cluster and runs
// the pods scheduled to it through a CRI runtime (cri-compose, or any
// other), as kubelet would. See pkg/vk.
package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/log"
	"github.com/virtual-kubelet/virtual-kubelet/log/klogv2"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/vk"
)

// version is vk-cri's version, reported as the node's kubelet version.
var version = "v1.37.2-vk-cri"

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "vk-cri failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "config-reference" {
		return runConfigReference(os.Args[2:])
	}
	var o options
	fs := newFlags("vk-cri", &o)
	_ = parseOptions(fs, &o, os.Args[1:])
	if o.version {
		fmt.Println("vk-cri", version)
		return nil
	}
	log.L = klogv2.New(nil)
	if o.nodeName == "" {
		return errors.New("--hostname-override is required (the host name is empty)")
	}
	taints, err := parseTaints(o.taints)
	if err != nil {
		return err
	}
	if err := vk.CheckPodCIDR(o.podCIDR); err != nil {
		return fmt.Errorf("--pod-cidr: %w", err)
	}
	stateDir, err := filepath.Abs(o.stateDir)
	if err != nil {
		return err
	}
	if err := vk.PrepareStateDir(stateDir); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	restCfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	restCfg.QPS, restCfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	nodeIP := o.nodeIP
	if nodeIP == "" {
		if nodeIP, err = outboundIP(restCfg.Host); err != nil {
			return fmt.Errorf("--node-ip not given and not found: %w", err)
		}
	}
	authCfg := vk.AuthConfig{ClientCAFile: o.clientCA, TokenWebhook: o.tokenWebhook, Anonymous: o.anonymousAuth, Mode: o.authorizationMode}
	auth, err := vk.NewAuth(client, o.nodeName, authCfg)
	if err != nil {
		return fmt.Errorf("kubelet API auth: %w", err)
	}
	listen, err := listenAddress(o.listenAddress, !authCfg.Open())
	if err != nil {
		return err
	}
	port, err := vk.PortOf(listen)
	if err != nil {
		return err
	}
	tlsCfg, err := vk.TLSConfig(o.tlsCert, o.tlsKey, o.clientCA, filepath.Join(stateDir, "pki"), o.nodeName, []string{nodeIP})
	if err != nil {
		return err
	}
	if o.rotateServerCerts {
		m, err := vk.ServingCertManager(client, o.nodeName, []string{o.nodeName}, []string{nodeIP}, filepath.Join(stateDir, "pki"))
		if err != nil {
			return err
		}
		vk.ServeRotated(tlsCfg, m)
		m.Start()
		defer m.Stop()
	}

	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	rt, err := vk.Dial(dialCtx, o.criEndpoint, o.requestTimeout)
	cancel()
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())

	dnsServers := splitList(o.clusterDNS)
	ctrls := vk.NewControllers(client, o.nodeName)
	provider, err := vk.New(ctx, vk.Config{
		NodeName: o.nodeName, NodeIPs: []string{nodeIP}, StateDir: stateDir, Runtime: rt,
		Client: client, Services: ctrls.Services,
		DNS:                  vk.DNS{ClusterDNS: dnsServers, ClusterDomain: o.clusterDomain, ResolvConf: o.resolvConf},
		PodCIDR:              o.podCIDR,
		ResyncPeriod:         o.resync,
		AllowedUnsafeSysctls: splitList(o.allowedUnsafeSysctls),
		ContainerLogs: vk.LogRotation{MaxSize: o.containerLogMaxSize.Value(), MaxFiles: o.containerLogMaxFiles,
			MaxWorkers: o.containerLogMaxWorkers, MonitorInterval: o.containerLogMonitorInterval},
	})
	if err != nil {
		return err
	}
	err = provider.ConfigureNode(ctx, ctrls.Node, vk.NodeConfig{Pods: o.pods, Taints: taints, KubeletPort: port, Version: version,
		KubeReserved: o.kubeReserved.list, SystemReserved: o.systemReserved.list})
	if err != nil {
		return err
	}
	api := provider.Handler(ctrls.Pods)
	if o.profiling {
		api = vk.WithProfiling(api, o.contention)
	}
	handler := vk.WithAuth(auth, api)
	runDone := make(chan struct{})
	go func() { provider.Run(ctx); close(runDone) }()
	if o.metricsAddress != "" {
		if err := serveMetrics(ctx, o.metricsAddress, provider.MetricsHandler()); err != nil {
			return err
		}
	}
	nodeDone := make(chan error, 1)
	go func() {
		nodeDone <- ctrls.Run(ctx, provider, vk.ServeConfig{Addr: listen, TLS: tlsCfg, Handler: handler, Workers: o.workers})
	}()
	klog.InfoS("vk-cri running", "node", o.nodeName, "nodeIP", nodeIP, "kubeletAPI", listen,
		"clientCA", o.clientCA != "", "authorization", o.authorizationMode, "anonymous", o.anonymousAuth, "cri", o.criEndpoint, "runtime", provider.RuntimeName(), "stateDir", stateDir)
	select {
	case <-ctrls.Ready():
		klog.InfoS("Node registered", "node", o.nodeName)
		err = <-nodeDone
	case err = <-nodeDone:
		if ctx.Err() == nil {
			err = fmt.Errorf("node not ready: %w", err)
		}
	}
	stop()
	<-runDone
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		klog.InfoS("Stopped; pods keep running")
		return nil
	}
	return err
}

// serveMetrics serves h at addr's /metrics until ctx ends.
func serveMetrics(ctx context.Context, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Serving metrics", "address", addr)
		}
	}()
	klog.InfoS("Serving metrics", "address", l.Addr().String())
	return nil
}

// reservedFlag is --kube-reserved or --system-reserved: like kubelet's
// map flags, each use adds its pairs (a later one wins for a resource).
type reservedFlag struct{ list v1.ResourceList }

func (f *reservedFlag) String() string {
	if f == nil || len(f.list) == 0 {
		return ""
	}
	var pairs []string
	for _, name := range slices.Sorted(maps.Keys(f.list)) {
		q := f.list[name]
		pairs = append(pairs, string(name)+"="+q.String())
	}
	return strings.Join(pairs, ",")
}

func (f *reservedFlag) Set(s string) error {
	l, err := vk.ParseReserved(s)
	if err != nil {
		return err
	}
	if f.list == nil {
		f.list = v1.ResourceList{}
	}
	maps.Copy(f.list, l)
	return nil
}

// splitList is a comma-separated flag's items, blanks trimmed, empty ones
// dropped.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func parseTaints(s string) ([]v1.Taint, error) {
	var out []v1.Taint
	for _, t := range strings.Split(s, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		taint, err := vk.ParseTaint(t)
		if err != nil {
			return nil, fmt.Errorf("--register-with-taints: %w", err)
		}
		out = append(out, taint)
	}
	return out, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// listenAddress applies the rule that the kubelet API is never served
// open to anyone beyond loopback: when it is (anonymous and AlwaysAllow),
// an address without a host becomes 127.0.0.1, and any other non-loopback
// host is an error.
func listenAddress(addr string, guarded bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--listen-address: %w", err)
	}
	if guarded {
		return addr, nil
	}
	if host == "" {
		klog.InfoS("The kubelet API is open to anyone (anonymous, AlwaysAllow): it listens on loopback only", "address", net.JoinHostPort("127.0.0.1", port))
		return net.JoinHostPort("127.0.0.1", port), nil
	}
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		return addr, nil
	}
	return "", fmt.Errorf("--listen-address %s: the kubelet API would be open to anyone; turn off --anonymous-auth, use --authorization-mode=Webhook or a loopback address", addr)
}

// outboundIP is the local address the host uses to reach the API server
// (a UDP "connection" sends nothing).
func outboundIP(apiServer string) (string, error) {
	u, err := url.Parse(apiServer)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}
