package main

import (
	"flag"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri"
)

// options are cri-compose's settings: those of the config file
// (fileConfig) and those that exist only on the command line.
type options struct {
	fileConfig
	configFile string
	mirrors    stringList
	version    bool
}

// newFlags defines every flag of cri-compose, klog's included, bound to o.
// docs/configuration.md is generated from it (config-reference).
func newFlags(name string, o *options) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	klog.InitFlags(fs)
	fs.StringVar(&o.configFile, "config", "", "YAML config file (flags given on the command line override it)")
	fs.StringVar(&o.Listen, "listen", "unix:///run/cri-compose/cri-compose.sock", "CRI socket to serve")
	fs.StringVar(&o.SocketGroup, "socket-group", "", "group owning the CRI socket (mode 0660); it may also read the state dir (compose files 0640, folders 0750) and the CRI log files cri-compose writes, which are otherwise root's alone")
	fs.StringVar(&o.ListenTCP, "listen-tcp", "", "host:port to also serve the CRI on over TCP, with mutual TLS only: needs --tls-cert-file, --tls-private-key-file and --client-ca-file (default: off)")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "server certificate (PEM) of the --listen-tcp listener")
	fs.StringVar(&o.TLSPrivateKey, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	fs.StringVar(&o.ClientCAFile, "client-ca-file", "", "CA bundle (PEM) that client certificates of the --listen-tcp listener must be signed by")
	fs.StringVar(&o.DockerHost, "docker-host", "", "Docker Engine endpoint: unix:///path, tcp://host:port (TLS with --docker-cert-path; plain only to loopback) or ssh://[user@]host[:port][/path/to/docker.sock] (default: $DOCKER_HOST or the local socket)")
	fs.StringVar(&o.DockerCertPath, "docker-cert-path", "", "folder with ca.pem, cert.pem and key.pem for a tcp:// engine; the server certificate is always verified against ca.pem (default: $DOCKER_CERT_PATH, or ~/.docker if $DOCKER_TLS_VERIFY is set)")
	fs.BoolVar(&o.DockerAllowPlainTCP, "docker-allow-plain-tcp", false, "allow tcp:// without TLS to an engine that is not on a loopback address (anyone on the path gets root on the engine's host)")
	fs.StringVar(&o.SSHKnownHosts, "ssh-known-hosts", "", "known_hosts file an ssh:// engine's host key must be in (default: ~/.ssh/known_hosts)")
	fs.StringVar(&o.SSHIdentityFile, "ssh-identity-file", "", "private key for ssh:// engines, unencrypted (default: ~/.ssh/id_ed25519 and ~/.ssh/id_rsa if present; the agent at $SSH_AUTH_SOCK is used too)")
	fs.BoolVar(&o.SSHInsecureIgnoreHostKey, "ssh-insecure-ignore-host-key", false, "accept any host key from an ssh:// engine (unsafe: a man in the middle gets the engine)")
	fs.StringVar(&o.StageMounts, "stage-mounts", "auto", "copy host-path mounts into per-pod Docker volumes on the engine: auto (when the engine does not share this machine's filesystem: ssh://, tcp:// to another host, or an engine whose name is not this host's), always, never")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/cri-compose", "folder for compose files and other derived state; closed to other users (0700, or 0750 for --socket-group), and tightened at start if it is not")
	fs.StringVar(&o.Network, "network", "cri-compose", "bridge network every pod joins (created if missing)")
	fs.StringVar(&o.NetworkSubnet, "network-subnet", "", "subnets of the pod network when it is created, comma-separated, at most one IPv4 and one IPv6 (default: the engine picks); the node's pod CIDR, sent by kubelet, replaces them")
	o.IPMasq = new(bool) // a pointer: the config file may say false
	fs.BoolVar(o.IPMasq, "ip-masq", true, "let the engine masquerade what pods send off the host (the pod network's com.docker.network.bridge.enable_ip_masquerade); false where the cluster network masquerades only what leaves the cluster CIDR (flanneld --ip-masq), so that pods on other hosts see a pod's own address; a pod network made otherwise is made again once no pod is on it")
	fs.IntVar(&o.NetworkMTU, "network-mtu", 0, "MTU of the pod network and the pods' interfaces (com.docker.network.driver.mtu), e.g. 1450 under a VXLAN overlay on a 1500-byte link, flanneld's FLANNEL_MTU (0: the engine's default); a pod network made otherwise is made again once no pod is on it")
	fs.StringVar(&o.PodInfraImage, "pod-infra-image", "", "infra (pause) image (default: the built-in one, loaded into the engine)")
	fs.StringVar(&o.ImagePullProgressTimeout, "image-pull-progress-timeout", "5m", "cancel an image pull from a mirror or registry that makes no progress for this long; a mirror's then passes to the next mirror or the registry (0: never)")
	fs.Var(&o.mirrors, "registry-mirror", "registry mirror as host=endpoint[,endpoint…], e.g. registry.k8s.io=http://127.0.0.1:5000 (repeatable)")
	fs.StringVar(&o.StreamAddress, "stream-address", cri.DefaultStreamAddress, "host:port of the streaming server for exec, attach and port-forward (port 0: a free port)")
	fs.StringVar(&o.MetricsAddress, "metrics-address", "", "host:port to serve Prometheus metrics on, at /metrics, e.g. 127.0.0.1:9090 (default: off)")
	fs.StringVar(&o.OTLPEndpoint, "otlp-endpoint", "", "OpenTelemetry collector to send traces to over OTLP/gRPC: http://host:4317 (plain text), https://host:4317 (TLS) or host:port (plain text); OTEL_EXPORTER_OTLP_* and OTEL_TRACES_SAMPLER apply (default: off)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	return fs
}

// parseOptions parses args into o and merges the config file, as the
// server does; the subcommands that read the settings (doctor) use it.
func parseOptions(fs *flag.FlagSet, o *options, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.configFile != "" {
		return mergeFile(fs, o.configFile, &o.fileConfig)
	}
	return nil
}
