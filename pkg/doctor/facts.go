package doctor

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/system"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Config says where to look: the same settings cri-compose runs with.
type Config struct {
	DockerHost string             // "" = DOCKER_HOST or the local socket
	Endpoint   dockerapi.Endpoint // how tcp:// and ssh:// hosts are reached
	StateDir   string
	Listen     string // the CRI endpoint, unix:///path
	// Network is the pod network, and NetworkSubnets those it is made
	// with if missing: whether pods use IPv6.
	Network        string
	NetworkSubnets []netip.Prefix

	// PluginDirs are where the docker CLI finds plugins (Compose v2);
	// nil means DefaultPluginDirs().
	PluginDirs []string
}

// DefaultPluginDirs are the docker CLI's plugin folders on Linux, the
// user's own first ($DOCKER_CONFIG/cli-plugins or ~/.docker/cli-plugins).
func DefaultPluginDirs() []string {
	var dirs []string
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		dirs = append(dirs, filepath.Join(d, "cli-plugins"))
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".docker", "cli-plugins"))
	}
	return append(dirs,
		"/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins",
		"/usr/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins")
}

// Facts is everything the checks judge, read once from the host.
type Facts struct {
	EngineHost  string
	EngineLocal bool
	PingErr     error  // nil: the engine answered (and its API is new enough)
	APIVersion  string // negotiated

	Version    dockerapi.Version
	VersionErr error
	Info       system.Info
	InfoErr    error
	// InfoSent and InfoReceived bracket the Info call, whose SystemTime
	// is compared with them for clock skew.
	InfoSent, InfoReceived time.Time

	// Host is what cri-compose itself concludes about the host
	// (cri.HostFacts); KernelCaps are the capabilities the kernel knows.
	Host       sandbox.Host
	KernelCaps []string

	ComposeV2     string   // path of the docker-compose CLI plugin; "" if none
	PluginDirs    []string // where it was looked for
	ComposeV1     string   // docker-compose on PATH; "" if none
	ComposeV1Kind string   // "python script" (Compose v1) or "binary"

	StateDir     PathInfo
	Socket       PathInfo
	SocketServed bool
	EngineSocket PathInfo // Path "" when the engine is not on a unix socket

	// What cluster networking (kube-proxy, an overlay) needs of this
	// host: Sysctls are the values of ClusterSysctls, by name, absent
	// where unreadable; BridgeNetfilter is whether br_netfilter is loaded
	// (/proc/sys/net/bridge exists); PodSubnets are the pod network's, or
	// those it is to be made with.
	Sysctls         map[string]string
	BridgeNetfilter bool
	PodSubnets      []netip.Prefix
}

// The sysctls that cluster networking needs, or that kube-proxy sets.
const (
	SysctlBridgeNFIPTables  = "net.bridge.bridge-nf-call-iptables"
	SysctlBridgeNFIP6Tables = "net.bridge.bridge-nf-call-ip6tables"
	SysctlIPForward         = "net.ipv4.ip_forward"
	SysctlRouteLocalnet     = "net.ipv4.conf.all.route_localnet"
)

// ClusterSysctls are the sysctls Gather reads.
var ClusterSysctls = []string{SysctlBridgeNFIPTables, SysctlBridgeNFIP6Tables, SysctlIPForward, SysctlRouteLocalnet}

// PathInfo is what a check needs to know about a file or folder.
type PathInfo struct {
	Path     string
	Exists   bool
	Mode     fs.FileMode
	Owner    string // user:group
	Writable bool   // by this process (access(2))
	Err      error  // other than not existing
	// Parent is the nearest existing ancestor of a missing path, and
	// whether this process may write there (to create the path).
	Parent         string
	ParentWritable bool
}

// Gather reads the facts: engine calls bounded by ctx, files, the PATH. It
// runs nothing.
func Gather(ctx context.Context, cfg Config) Facts {
	var f Facts
	d, err := dockerapi.New(cfg.DockerHost, dockerapi.WithEndpoint(cfg.Endpoint))
	if err != nil {
		f.EngineHost, f.PingErr = cfg.DockerHost, err
	} else {
		defer d.Close()
		f.EngineHost, f.EngineLocal = d.Host(), d.IsLocal()
		f.gatherEngine(ctx, d)
		if f.PingErr == nil && cfg.Network != "" {
			nctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			f.PodSubnets, _, err = d.NetworkSubnets(nctx, cfg.Network)
			cancel()
			if err != nil {
				f.PodSubnets = nil
			}
		}
	}
	if f.PodSubnets == nil {
		f.PodSubnets = cfg.NetworkSubnets
	}
	// This process's network namespace: the engine's, for a local engine
	// that is not itself in a container.
	f.Sysctls = map[string]string{}
	for _, name := range ClusterSysctls {
		if b, err := os.ReadFile(sysctlPath(name)); err == nil {
			f.Sysctls[name] = strings.TrimSpace(string(b))
		}
	}
	_, err = os.Stat("/proc/sys/net/bridge")
	f.BridgeNetfilter = err == nil
	f.Host = cri.HostFacts(f.Info, f.EngineLocal)
	f.KernelCaps = cri.EngineCapabilities(f.Info)

	f.PluginDirs = cfg.PluginDirs
	if f.PluginDirs == nil {
		f.PluginDirs = DefaultPluginDirs()
	}
	for _, dir := range f.PluginDirs {
		if p := filepath.Join(dir, "docker-compose"); isExecutable(p) {
			f.ComposeV2 = p
			break
		}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		f.ComposeV1, f.ComposeV1Kind = p, scriptOrBinary(p)
	}

	f.StateDir = statPath(cfg.StateDir)
	f.Socket = statPath(strings.TrimPrefix(cfg.Listen, "unix://"))
	if f.Socket.Exists && f.Socket.Mode.Type() == fs.ModeSocket {
		if c, err := net.DialTimeout("unix", f.Socket.Path, time.Second); err == nil {
			c.Close()
			f.SocketServed = true
		}
	}
	if p, ok := strings.CutPrefix(f.EngineHost, "unix://"); ok {
		f.EngineSocket = statPath(p)
	}
	return f
}

func (f *Facts) gatherEngine(ctx context.Context, d *dockerapi.Client) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, f.PingErr = d.Ping(ctx); f.PingErr != nil {
		return
	}
	f.APIVersion = d.APIVersion()
	f.Version, f.VersionErr = d.ServerVersion(ctx)
	f.InfoSent = time.Now()
	f.Info, f.InfoErr = d.Info(ctx)
	f.InfoReceived = time.Now()
}

// sysctlPath is the file of a sysctl (its name has no dots of its own).
func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// scriptOrBinary tells Debian's Compose v1 (a Python script) from a
// binary (Compose v2 installed standalone, or v1's PyInstaller build) by
// the file's first bytes.
func scriptOrBinary(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 128)
	n, _ := f.Read(b)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	switch {
	case strings.HasPrefix(line, "#!") && strings.Contains(line, "python"):
		return "python script"
	case strings.HasPrefix(line, "\x7fELF"):
		return "binary"
	}
	return ""
}

func statPath(p string) PathInfo {
	pi := PathInfo{Path: p}
	if p == "" {
		return pi
	}
	st, err := os.Stat(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			pi.Err = err
			return pi
		}
		for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(dir); err == nil {
				pi.Parent, pi.ParentWritable = dir, syscall.Access(dir, 2 /* W_OK */) == nil
				break
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
		return pi
	}
	pi.Exists, pi.Mode = true, st.Mode()
	pi.Writable = syscall.Access(p, 2 /* W_OK */) == nil
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		pi.Owner = userName(sys.Uid) + ":" + groupName(sys.Gid)
	}
	return pi
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return strconv.FormatUint(uint64(uid), 10)
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return g.Name
	}
	return strconv.FormatUint(uint64(gid), 10)
}
