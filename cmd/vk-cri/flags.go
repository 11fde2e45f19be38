package main

import (
	"flag"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/vk"
)

const defaultTaint = "virtual-kubelet.io/provider=cri-compose:NoSchedule"

type options struct {
	kubeconfig     string
	nodeName       string
	criEndpoint    string
	requestTimeout time.Duration
	pods           int64
	taints         string
	listenAddress  string
	stateDir       string
	nodeIP         string
	tlsCert        string
	tlsKey         string
	clientCA       string
	clusterDNS     string
	podCIDR        string
	clusterDomain  string
	resolvConf     string
	resync         time.Duration
	workers        int
	kubeAPIQPS     float64
	kubeAPIBurst   int
	// Taken off the node's capacity for its allocatable.
	kubeReserved   reservedFlag
	systemReserved reservedFlag
	// Sysctls pods may set beyond kubelet's safe set.
	allowedUnsafeSysctls string
	// kubelet's container log rotation.
	containerLogMaxSize         resource.QuantityValue
	containerLogMaxFiles        int
	containerLogMaxWorkers      int
	containerLogMonitorInterval time.Duration

	// vk-cri's own metrics (pkg/vk/metrics.go) on a plain HTTP address
	// of their own too, off unless set; the kubelet API's /metrics
	// serves them anyway.
	metricsAddress string
	profiling      bool
	contention     bool

	// Kubelet API auth and serving certificate, with kubelet's flags.
	anonymousAuth     bool
	tokenWebhook      bool
	authorizationMode string
	rotateServerCerts bool

	version bool
}

// deprecatedAliases are vk-cri's first names of flags that kubelet names
// otherwise: each still sets the same value as kubelet's name, and says
// so in the log when used.
var deprecatedAliases = map[string]string{
	"cri-endpoint": "container-runtime-endpoint",
	"nodename":     "hostname-override",
	"pods":         "max-pods",
	"state-dir":    "root-dir",
	"taint":        "register-with-taints",
	"resync":       "sync-frequency",
}

// newFlags defines every flag of vk-cri, klog's included, bound to o, with
// kubelet's names, defaults and meanings where kubelet has the same
// setting. docs/configuration.md is generated from it (config-reference).
// Defaults that depend on the machine ($KUBECONFIG, the host name) are
// applied by applyDefaults after parsing, so the reference shows none.
func newFlags(name string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	klog.InitFlags(fs)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster to join (default: $KUBECONFIG, else in-cluster)")
	fs.StringVar(&o.nodeName, "hostname-override", "", "name of the node (default: the host name, lower-cased)")
	fs.StringVar(&o.criEndpoint, "container-runtime-endpoint", "unix:///run/cri-compose/cri-compose.sock", "CRI runtime endpoint")
	fs.DurationVar(&o.requestTimeout, "runtime-request-timeout", 2*time.Minute, "timeout of each CRI call but image pulls, which take the pod worker's deadline")
	fs.Int64Var(&o.pods, "max-pods", 110, "pod capacity of the node")
	fs.StringVar(&o.taints, "register-with-taints", defaultTaint, "taints of the node, key[=value]:effect, comma-separated (\"\" for none)")
	fs.StringVar(&o.listenAddress, "listen-address", ":10250", "address of the kubelet API (logs, exec, attach, port-forward). With --anonymous-auth and --authorization-mode=AlwaysAllow it is served on 127.0.0.1 only")
	fs.StringVar(&o.stateDir, "root-dir", "/var/lib/vk-cri", "folder for the pods' volume files, logs and the serving certificate (made 0750 and closed to other users: it holds the pods' secrets)")
	fs.StringVar(&o.nodeIP, "node-ip", "", "the node's InternalIP (default: the address that reaches the API server)")
	fs.StringVar(&o.tlsCert, "tls-cert-file", "", "serving certificate of the kubelet API (default: self-signed, kept in the root dir)")
	fs.StringVar(&o.tlsKey, "tls-private-key-file", "", "key of --tls-cert-file")
	fs.StringVar(&o.clientCA, "client-ca-file", "", "CA whose client certificates authenticate to the kubelet API (the API server's --kubelet-client-certificate); user = CN, groups = O")
	fs.BoolVar(&o.tokenWebhook, "authentication-token-webhook", true, "authenticate bearer tokens to the kubelet API through TokenReview (cached 2 min)")
	fs.BoolVar(&o.anonymousAuth, "anonymous-auth", false, "let requests without credentials to the kubelet API through as system:anonymous (otherwise 401)")
	fs.StringVar(&o.authorizationMode, "authorization-mode", vk.AuthzWebhook, "kubelet API authorization: Webhook (SubjectAccessReview on nodes/<subresource> as kubelet's: proxy, pods, log, stats, metrics, healthz; cached 5 min allowed, 30 s denied) or AlwaysAllow")
	fs.BoolVar(&o.rotateServerCerts, "rotate-server-certificates", false, "request the kubelet API's serving certificate from the cluster (CSR, signer kubernetes.io/kubelet-serving; someone must approve it) and renew it before it expires; until it is issued the self-signed (or --tls-cert-file) one is served")
	fs.StringVar(&o.clusterDNS, "cluster-dns", "", "cluster DNS servers for dnsPolicy ClusterFirst, comma-separated (none: ClusterFirst acts as Default)")
	fs.StringVar(&o.podCIDR, "pod-cidr", "", "the node's pod CIDR, comma-separated (one IPv4, one IPv6), handed to the runtime when the Node's spec.podCIDRs is empty; the Node's wins")
	fs.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "cluster domain")
	fs.StringVar(&o.resolvConf, "resolv-conf", "/etc/resolv.conf", "resolver configuration for dnsPolicy Default (\"\": the runtime's default)")
	fs.DurationVar(&o.resync, "sync-frequency", 30*time.Second, "how often every pod is checked against the runtime, events or not")
	fs.IntVar(&o.workers, "pod-sync-workers", 4, "virtual-kubelet pod controller workers")
	// kubelet's defaults: client-go's own (5 QPS, burst 10) leave pods
	// created together waiting for their status updates.
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 50, "queries per second to the API server (as kubelet's)")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 100, "burst of queries to the API server (as kubelet's)")
	const reservedHelp = " (ResourceName=ResourceQuantity pairs, e.g. cpu=100m,memory=256Mi,ephemeral-storage=1Gi,pid=1000; as kubelet's, repeatable). " +
		"The node's allocatable is its capacity less --kube-reserved and --system-reserved, never below zero; vk-cri refuses to start when they exceed the capacity. " +
		"Only cpu, memory, ephemeral-storage and pid can be reserved; pid is no node capacity and takes nothing off allocatable. [default=none]"
	fs.Var(&o.kubeReserved, "kube-reserved", "resources reserved for Kubernetes components (vk-cri, the runtime, the engine)"+reservedHelp)
	fs.Var(&o.systemReserved, "system-reserved", "resources reserved for the host's own system daemons"+reservedHelp)
	fs.StringVar(&o.allowedUnsafeSysctls, "allowed-unsafe-sysctls", "", "comma-separated unsafe sysctls or sysctl patterns (ending in *) pods may set beyond kubelet's safe set, e.g. kernel.msg*,net.core.somaxconn; a pod setting another one is Failed with reason SysctlForbidden. Use these at your own risk")
	d := vk.DefaultLogRotation
	o.containerLogMaxSize.Quantity = *resource.NewQuantity(d.MaxSize, resource.BinarySI)
	fs.Var(&o.containerLogMaxSize, "container-log-max-size", "size (a quantity, e.g. 10Mi) at which a container's log is rotated; 0 turns rotation off")
	fs.IntVar(&o.containerLogMaxFiles, "container-log-max-files", d.MaxFiles, "log files kept per container, the live one included (at least 2); older rotated ones are gzipped")
	fs.IntVar(&o.containerLogMaxWorkers, "container-log-max-workers", d.MaxWorkers, "containers whose logs are rotated at once")
	fs.DurationVar(&o.containerLogMonitorInterval, "container-log-monitor-interval", d.MonitorInterval, "how often the containers' log sizes are checked (at least 3s)")
	fs.StringVar(&o.metricsAddress, "metrics-bind-address", "", "address for vk-cri's Prometheus metrics over plain HTTP, e.g. 127.0.0.1:10255 (\"\": off; the kubelet API serves them at /metrics either way)")
	fs.BoolVar(&o.profiling, "profiling", true, "serve Go's pprof profiles at /debug/pprof/ on the kubelet API (authorized as nodes/proxy), as kubelet's enableProfilingHandler")
	fs.BoolVar(&o.contention, "contention-profiling", false, "with --profiling, sample blocking and mutex waits too (kubelet's enableContentionProfiling; costs a little on every lock)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	for alias, name := range deprecatedAliases {
		fs.Var(fs.Lookup(name).Value, alias, "deprecated alias of --"+name)
	}
	return fs
}

// parseOptions parses args into o and applies the machine's defaults.
func parseOptions(fs *flag.FlagSet, o *options, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) {
		if name, ok := deprecatedAliases[f.Name]; ok {
			klog.InfoS("Flag is deprecated, use its kubelet name", "flag", "--"+f.Name, "use", "--"+name)
		}
	})
	if o.kubeconfig == "" {
		o.kubeconfig = os.Getenv("KUBECONFIG")
	}
	if o.nodeName == "" {
		hostname, _ := os.Hostname()
		o.nodeName = strings.ToLower(hostname)
	}
	return nil
}
