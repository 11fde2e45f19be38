// Command cri-compose serves the CRI (RuntimeService and ImageService) on a
// unix socket and runs every pod sandbox as a Docker Compose project on a
// Docker Engine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/cri/images"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// fileConfig is the optional YAML config file; flags given on the command
// line win over it.
type fileConfig struct {
	Listen          string              `json:"listen" flag:"listen"`
	SocketGroup     string              `json:"socketGroup" flag:"socket-group"`
	ListenTCP       string              `json:"listenTCP" flag:"listen-tcp"` // mutual TLS only
	TLSCertFile     string              `json:"tlsCertFile" flag:"tls-cert-file"`
	TLSPrivateKey   string              `json:"tlsPrivateKeyFile" flag:"tls-private-key-file"`
	ClientCAFile    string              `json:"clientCAFile" flag:"client-ca-file"`
	DockerHost      string              `json:"dockerHost" flag:"docker-host"`
	StateDir        string              `json:"stateDir" flag:"state-dir"`
	Network         string              `json:"network" flag:"network"`
	NetworkSubnet   string              `json:"networkSubnet" flag:"network-subnet"`
	IPMasq          *bool               `json:"ipMasq" flag:"ip-masq"`
	NetworkMTU      int                 `json:"networkMTU" flag:"network-mtu"`
	PodInfraImage   string              `json:"podInfraImage" flag:"pod-infra-image"`
	RegistryMirrors map[string][]string `json:"registryMirrors" flag:"registry-mirror"`
	LogLevel        *int                `json:"logLevel" flag:"v"`
	StreamAddress   string              `json:"streamAddress" flag:"stream-address"` // exec/attach/port-forward server
	MetricsAddress  string              `json:"metricsAddress" flag:"metrics-address"`
	OTLPEndpoint    string              `json:"otlpEndpoint" flag:"otlp-endpoint"`
	// Remote engines: remote.go.
	DockerCertPath           string `json:"dockerCertPath" flag:"docker-cert-path"`
	DockerAllowPlainTCP      bool   `json:"dockerAllowPlainTCP" flag:"docker-allow-plain-tcp"`
	SSHKnownHosts            string `json:"sshKnownHosts" flag:"ssh-known-hosts"`
	SSHIdentityFile          string `json:"sshIdentityFile" flag:"ssh-identity-file"`
	SSHInsecureIgnoreHostKey bool   `json:"sshInsecureIgnoreHostKey" flag:"ssh-insecure-ignore-host-key"`
	StageMounts              string `json:"stageMounts" flag:"stage-mounts"`
	// A duration ("5m"; "0" never cancels).
	ImagePullProgressTimeout string `json:"imagePullProgressTimeout" flag:"image-pull-progress-timeout"`
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) > 1 && subcommands[os.Args[1]] != nil { // commands.go
		os.Exit(subcommands[os.Args[1]](os.Args[2:]))
	}
	if err := run(); err != nil {
		klog.ErrorS(err, "cri-compose failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run() error {
	var o options
	fs := newFlags("cri-compose", &o) // flags.go
	_ = fs.Parse(os.Args[1:])
	fc, mirrors := &o.fileConfig, o.mirrors
	if o.version {
		fmt.Println("cri-compose", cri.Version)
		return nil
	}
	if o.configFile != "" {
		if err := mergeFile(fs, o.configFile, fc); err != nil {
			return err
		}
	}
	m, err := images.ParseMirrors(mirrors)
	if err != nil {
		return fmt.Errorf("--registry-mirror: %w", err)
	}
	for host, eps := range fc.RegistryMirrors {
		if _, set := m[host]; !set {
			m[host] = eps
		}
	}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("registry mirrors: %w", err)
	}
	pullTimeout, err := time.ParseDuration(fc.ImagePullProgressTimeout)
	if err != nil || pullTimeout < 0 {
		return fmt.Errorf("--image-pull-progress-timeout %q: a duration such as 5m, or 0 for none", fc.ImagePullProgressTimeout)
	}
	var subnets []netip.Prefix
	if fc.NetworkSubnet != "" {
		if subnets, err = cri.ParseSubnets(fc.NetworkSubnet); err != nil {
			return fmt.Errorf("--network-subnet: %w", err)
		}
	}
	// The IPv4 minimum; the engine refuses less than 1280 with IPv6.
	if fc.NetworkMTU != 0 && (fc.NetworkMTU < 68 || fc.NetworkMTU > 65535) {
		return fmt.Errorf("--network-mtu %d: 0 (the engine's default) or 68 to 65535", fc.NetworkMTU)
	}
	netOpts := dockerapi.BridgeOptions{NoIPMasquerade: !*fc.IPMasq, MTU: fc.NetworkMTU}

	tel, err := startTelemetry(fc) // telemetry.go: --metrics-address, --otlp-endpoint
	if err != nil {
		return err
	}
	defer tel.shutdown()
	stage, err := fc.stageMode() // remote.go
	if err != nil {
		return err
	}
	d, err := dockerapi.New(fc.DockerHost, append(tel.dockerOptions(), dockerapi.WithEndpoint(fc.endpoint()))...)
	if err != nil {
		return err
	}
	defer d.Close()
	srv := cri.NewServer(cri.Config{
		StateDir: fc.StateDir, SocketGroup: fc.SocketGroup, Network: fc.Network, NetworkSubnets: subnets, NetworkOptions: netOpts,
		PodInfraImage: fc.PodInfraImage, Mirrors: m, ImagePullProgressTimeout: pullTimeout,
		StreamAddress: fc.StreamAddress, StageMounts: stage,
	}, d)
	if _, err := srv.StreamURL(); err != nil { // streaming server: --stream-address
		return err
	}

	// The optional TCP listener exists only with mutual TLS: checked
	// before anything listens.
	var tcpCreds credentials.TransportCredentials
	if fc.ListenTCP != "" {
		if tcpCreds, err = cri.TCPCredentials(cri.TCPTLS{CertFile: fc.TLSCertFile, KeyFile: fc.TLSPrivateKey, ClientCAFile: fc.ClientCAFile}); err != nil {
			return fmt.Errorf("--listen-tcp %s: %w", fc.ListenTCP, err)
		}
	}

	l, err := cri.Listen(fc.Listen, fc.SocketGroup)
	if err != nil {
		return err
	}
	g := grpc.NewServer(tel.serverOptions()...)
	srv.Register(g)
	var gTCP *grpc.Server // --listen-tcp
	if tcpCreds != nil {
		lt, err := cri.ListenTCP(fc.ListenTCP)
		if err != nil {
			l.Close()
			return err
		}
		gTCP = grpc.NewServer(append(tel.serverOptions(), grpc.Creds(tcpCreds))...)
		srv.Register(gTCP)
		go func() { _ = gTCP.Serve(lt) }()
		klog.InfoS("Serving CRI over TCP with mutual TLS", "address", lt.Addr().String(), "clientCA", fc.ClientCAFile)
	}
	if err := tel.serveMetrics(d.Collectors(), srv.Collectors()); err != nil {
		l.Close()
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	runDone := make(chan struct{})
	runCtx, cancelRun := context.WithCancel(context.Background())
	go func() { srv.Run(runCtx); close(runDone) }()

	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(l) }()
	klog.InfoS("Serving CRI", "socket", fc.Listen, "engine", d.Host(), "stateDir", fc.StateDir, "version", cri.Version)

	select {
	case <-ctx.Done():
		klog.InfoS("Shutting down; pods keep running")
	case err = <-serveErr:
	}
	// The event and log streams last as long as their clients: end them,
	// or the graceful stop below waits its whole 10 s for them.
	srv.CloseStreams()
	stopped := make(chan struct{})
	go func() {
		if gTCP != nil {
			gTCP.GracefulStop()
		}
		g.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		if gTCP != nil {
			gTCP.Stop()
		}
		g.Stop()
	}
	cancelRun()
	<-runDone
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// mergeFile fills fc from the YAML file for every setting not given as a
// flag, and applies the file's logLevel unless -v was given.
func mergeFile(fs *flag.FlagSet, path string, fc *fileConfig) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var file fileConfig
	if err := yaml.UnmarshalStrict(b, &file); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	pick := func(name string, dst *string, v string) {
		if !set[name] && v != "" {
			*dst = v
		}
	}
	pick("listen", &fc.Listen, file.Listen)
	pick("socket-group", &fc.SocketGroup, file.SocketGroup)
	pick("listen-tcp", &fc.ListenTCP, file.ListenTCP)
	pick("tls-cert-file", &fc.TLSCertFile, file.TLSCertFile)
	pick("tls-private-key-file", &fc.TLSPrivateKey, file.TLSPrivateKey)
	pick("client-ca-file", &fc.ClientCAFile, file.ClientCAFile)
	pick("docker-host", &fc.DockerHost, file.DockerHost)
	pick("state-dir", &fc.StateDir, file.StateDir)
	pick("network", &fc.Network, file.Network)
	pick("network-subnet", &fc.NetworkSubnet, file.NetworkSubnet)
	pick("pod-infra-image", &fc.PodInfraImage, file.PodInfraImage)
	pick("image-pull-progress-timeout", &fc.ImagePullProgressTimeout, file.ImagePullProgressTimeout)
	pick("stream-address", &fc.StreamAddress, file.StreamAddress)
	pick("metrics-address", &fc.MetricsAddress, file.MetricsAddress)
	pick("otlp-endpoint", &fc.OTLPEndpoint, file.OTLPEndpoint)
	pick("docker-cert-path", &fc.DockerCertPath, file.DockerCertPath)
	pick("ssh-known-hosts", &fc.SSHKnownHosts, file.SSHKnownHosts)
	pick("ssh-identity-file", &fc.SSHIdentityFile, file.SSHIdentityFile)
	pick("stage-mounts", &fc.StageMounts, file.StageMounts)
	pickBool := func(name string, dst *bool, v bool) {
		if !set[name] && v {
			*dst = true
		}
	}
	pickBool("docker-allow-plain-tcp", &fc.DockerAllowPlainTCP, file.DockerAllowPlainTCP)
	pickBool("ssh-insecure-ignore-host-key", &fc.SSHInsecureIgnoreHostKey, file.SSHInsecureIgnoreHostKey)
	if !set["ip-masq"] && file.IPMasq != nil {
		*fc.IPMasq = *file.IPMasq
	}
	if !set["network-mtu"] && file.NetworkMTU != 0 {
		fc.NetworkMTU = file.NetworkMTU
	}
	fc.RegistryMirrors = file.RegistryMirrors
	if file.LogLevel != nil && !set["v"] {
		_ = fs.Set("v", fmt.Sprint(*file.LogLevel))
	}
	return nil
}
