// Package cri serves the CRI v1 RuntimeService and ImageService on top of
// the Docker Engine: one file per RPC, state from pkg/sandbox's labels, and
// an in-memory store kept current by the engine's event stream.
package cri

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/images"
	"github.com/cri-compose/cri-compose/pkg/cri/perm"
	"github.com/cri-compose/cri-compose/pkg/cri/staging"
	"github.com/cri-compose/cri-compose/pkg/cri/stats"
	"github.com/cri-compose/cri-compose/pkg/cri/store"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Version is cri-compose's version, reported by the Version RPC.
var Version = "0.1.0"

// Config is what the runtime needs from flags and the config file.
type Config struct {
	StateDir string
	// SocketGroup is the group of the CRI socket (--socket-group, a name
	// or a gid): it may read the state dir and the CRI log files too,
	// which are otherwise root's alone (state_dir.go).
	SocketGroup string
	Network     string
	// NetworkSubnets are the pod network's subnets when it is created, at
	// most one per address family (ParseSubnets); the node's pod CIDR
	// (UpdateRuntimeConfig) replaces them.
	NetworkSubnets []netip.Prefix
	// NetworkOptions are the pod network's bridge options (--ip-masq,
	// --network-mtu). A network made with others is made again once no
	// container is attached to it (runtime_config.go).
	NetworkOptions dockerapi.BridgeOptions
	// PodInfraImage overrides the built-in pause image.
	PodInfraImage string
	Mirrors       images.Mirrors
	// ImagePullProgressTimeout cancels a pull (from a mirror or the
	// registry) that makes no progress for that long (0: never).
	ImagePullProgressTimeout time.Duration
	// LogConfig is the engine log driver for CRI containers (default:
	// json-file, 4 MiB × 5; pkg/sandbox/spec.go says why).
	LogConfig container.LogConfig

	// Streaming server (exec, attach, port-forward; streaming.go).
	// StreamAddress is host:port (default DefaultStreamAddress; port 0
	// picks a free port); StreamIdleTimeout defaults to
	// DefaultStreamIdleTimeout.
	StreamAddress     string
	StreamIdleTimeout time.Duration

	// StageMounts is when host-path mounts are copied to the engine
	// (pkg/cri/staging; "" is staging.Auto).
	StageMounts staging.Mode
}

// Server implements the CRI RuntimeService; ImageService is served beside it.
type Server struct {
	runtime.UnimplementedRuntimeServiceServer

	cfg    Config
	docker Engine
	events EventSource
	// resyncedConn is the event stream's Connection when the last resync
	// began: the store is current only once it is the stream's current one.
	resyncedConn atomic.Uint64
	images       *ImageService
	store        *store.Store
	pumps        *logPumps
	access       perm.Access // who may read the state dir and logs (state_dir.go)

	hostMu  sync.RWMutex
	host    sandbox.Host   // facts about the engine's host, filled by prepare
	subnets []netip.Prefix // the pod network's, when made (hostMu)
	// netPending says how the pod network differs from NetworkOptions
	// while containers keep it from being made again (hostMu).
	netPending string

	// netMu orders a change of the pod network (UpdateRuntimeConfig and
	// checkPodNetwork, which hold it) after sandboxes being attached to
	// it (RunPodSandbox, which shares it).
	netMu sync.RWMutex
	// netRecheck: the pod network's options are to be compared with
	// NetworkOptions again, by the next sandbox (checkPodNetwork).
	netRecheck atomic.Bool

	// prepMu, not a sync.Mutex: a caller waiting for another's prepare
	// of a slow engine gives up at its deadline.
	prepMu   ctxMutex
	prepared bool

	// started is when this server was made: files last changed before it
	// cannot belong to a request in flight.
	started time.Time

	stream *streamServer // exec, attach, port-forward (streaming.go)
	// stopping ends when CloseStreams is called: long-lived streams
	// (FollowLog) end with it, so that a graceful stop need not wait.
	stopping    context.Context
	stopStreams context.CancelFunc
	stage       *staging.Stager // host-path mounts on remote engines
	projects    projectFolders  // the pods' project folders (compose_file.go)

	// files reads images' files: users and groups, image volumes.
	files *images.Files

	// stats and events (container_events.go, stats.go)
	cevents *containerEvents
	stats   *stats.Collector
}

// NewServer wires a runtime to an engine client. Call Run to start its
// background work before serving.
func NewServer(cfg Config, d *dockerapi.Client) *Server {
	return newServer(cfg, d, d.NewEvents())
}

// newServer wires a runtime to an engine and its event stream: the real
// client's, or a fake's in unit tests.
func newServer(cfg Config, d Engine, events EventSource) *Server {
	if cfg.Network == "" {
		cfg.Network = "cri-compose"
	}
	access := fileAccess(cfg.SocketGroup) // state_dir.go
	s := &Server{
		cfg:     cfg,
		docker:  d,
		subnets: cfg.NetworkSubnets,
		events:  events,
		pumps:   newLogPumps(d, access),
		access:  access,

		started: time.Now(),
	}
	s.files = images.NewFiles(d, cfg.StateDir, s.started, s.imageMounted)
	s.images = NewImageService(d, images.Options{Mirrors: cfg.Mirrors, PullProgressTimeout: cfg.ImagePullProgressTimeout}, s.files.ForgetImage)
	s.host = sandbox.Host{Network: cfg.Network, StateDir: cfg.StateDir, InfraImage: cfg.PodInfraImage, LogConfig: cfg.LogConfig}
	// stats and events: container_events.go, stats.go. The store's changes
	// feed GetContainerEvents, which reads the store back: the hub learns
	// of the store once it exists.
	s.cevents = newContainerEvents(nil)
	s.store = store.New(d, store.Options{
		Network: cfg.Network,
		// This server owns the pods of its state dir only.
		ProjectsDir: s.host.ProjectDir(""),
		OnContainer: s.cevents.onContainer,
		OnSandbox:   s.cevents.onSandbox,
		BeforeExit:  s.beforeExit, // logs.go
	})
	s.cevents.store = s.store
	s.stats = stats.New(d, statsSource{s.store}, stats.Options{})
	s.stream = newStreamServer(cfg.StreamAddress, cfg.StreamIdleTimeout, s) // listens now, serves from Run
	s.stage = staging.New(d, cfg.StateDir, func() string { return s.hostInfo().InfraImage })
	s.stopping, s.stopStreams = context.WithCancel(context.Background())
	return s
}

// CloseStreams ends the streams that only end when their client goes
// (GetContainerEvents, FollowLog) with Unavailable: call it before a
// graceful stop, which otherwise waits for them. Pods are untouched; a
// client such as vk-cri reconnects to the next process.
func (s *Server) CloseStreams() {
	s.stopStreams()
	s.cevents.close()
}

// Images is the ImageService to register beside the runtime.
func (s *Server) Images() *ImageService { return s.images }

// Run follows the engine until ctx ends: it prepares the engine (network,
// pause image, host facts) when it answers, rebuilds the store from it, and
// keeps both current across engine restarts. It also serves the streaming
// server (exec, attach, port-forward) until ctx ends.
func (s *Server) Run(ctx context.Context) {
	// Before any pod is read back or written: state_dir.go.
	if err := s.secureStateDir(); err != nil {
		klog.ErrorS(err, "Cannot close the state dir to other users")
	}
	streamDone := s.stream.start(ctx) // the streaming server stops with ctx
	go s.events.Run(ctx)
	go s.runStatsAndEvents(ctx) // stats and events: stats.go
	go s.stage.Run(ctx)         // staged mounts: pkg/cri/staging
	ch := s.events.Subscribe(ctx)
	for ev := range ch {
		if ev.Resync {
			s.resync(ctx)
			continue
		}
		s.handleEvent(ctx, ev)
	}
	s.pumps.close()
	<-streamDone
}

// prepare makes the engine ready for pods, once per engine start.
func (s *Server) prepare(ctx context.Context) error {
	if err := s.prepMu.lock(ctx); err != nil {
		return err
	}
	defer s.prepMu.unlock()
	if s.prepared {
		return nil
	}
	if _, err := s.docker.Ping(ctx); err != nil {
		return err
	}
	info, err := s.docker.Info(ctx)
	if err != nil {
		return err
	}
	h := hostFacts(info, s.docker.IsLocal())
	if _, err := s.docker.EnsureNetwork(ctx, s.cfg.Network, s.podNetworkSpec(s.podSubnets())); err != nil {
		return fmt.Errorf("pod network %s: %w", s.cfg.Network, err)
	}
	infra := s.cfg.PodInfraImage
	if infra == "" {
		infra = pause.Ref()
		if err := pause.Ensure(ctx, s.docker); err != nil {
			return fmt.Errorf("built-in pause image: %w", err)
		}
	}
	if err := s.access.MkdirAll(s.cfg.StateDir); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	s.hostMu.Lock()
	s.host.Capabilities = h.Capabilities
	s.host.FullPrivileged = h.FullPrivileged
	s.host.NegativeOOMScoreAdj = h.NegativeOOMScoreAdj
	s.host.AppArmor = h.AppArmor
	s.host.RecursiveReadOnly = s.docker.AtLeast("1.44")
	// An engine with CDI off reports no spec dirs (Engine API 1.44+).
	s.host.CDI = s.docker.AtLeast("1.44") && len(info.CDISpecDirs) > 0
	s.host.InfraImage = infra
	podCgroupRoot, noPodCgroups := podCgroups(s.docker.IsLocal() && s.docker.SharesFilesystem(), info.CgroupDriver)
	s.host.PodCgroupRoot, s.host.PodCgroupsWhyNot = podCgroupRoot, noPodCgroups
	stage := staging.Decide(s.cfg.StageMounts, s.docker.SharesFilesystem(), info.Name)
	s.host.StageMounts = stage
	s.hostMu.Unlock()
	if stage {
		s.stage.Adopt(ctx)
	}
	s.prepared = true
	klog.InfoS("Engine ready for pods", "host", s.docker.Host(), "api", s.docker.APIVersion(),
		"network", s.cfg.Network, "infraImage", infra, "fullPrivileged", h.FullPrivileged, "cdiSpecDirs", info.CDISpecDirs,
		"podCgroups", podCgroupRoot, "noPodCgroupsBecause", noPodCgroups)
	return nil
}

// unprepare forgets the engine's preparation (after it went away), so the
// network and pause image are checked again when it comes back.
func (s *Server) unprepare() {
	_ = s.prepMu.lock(context.Background())
	s.prepared = false
	s.prepMu.unlock()
}

// ctxMutex is a mutex whose lock gives up when the context ends. Its zero
// value is unlocked.
type ctxMutex struct {
	once sync.Once
	ch   chan struct{} // holds a token while locked
}

func (m *ctxMutex) lock(ctx context.Context) error {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *ctxMutex) unlock() { <-m.ch }

func (s *Server) hostInfo() sandbox.Host {
	s.hostMu.RLock()
	defer s.hostMu.RUnlock()
	return s.host
}

// ready prepares the engine if needed, for handlers that create things.
func (s *Server) ready(ctx context.Context) error {
	if err := s.prepare(ctx); err != nil {
		return fmt.Errorf("engine not ready: %w", err)
	}
	return nil
}
