package doctor

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

// The checks, in report order.
const (
	CheckEngine       = "engine"
	CheckVersion      = "engine version"
	CheckStorage      = "storage driver"
	CheckCgroups      = "cgroups"
	CheckCapabilities = "capability bounding set"
	CheckOOMScoreAdj  = "negative oom_score_adj"
	CheckPrivileged   = "privileged containers"
	CheckAppArmor     = "apparmor"
	CheckSeccomp      = "seccomp"
	CheckComposeV2    = "compose v2"
	CheckComposeV1    = "compose v1"
	CheckStateDir     = "state dir"
	CheckSocket       = "cri socket"
	CheckEngineSocket = "engine socket"
	CheckClock        = "clock skew"

	// Cluster networking (kube-proxy's Services, an overlay such as
	// flannel): warnings only, as pods run without it.
	CheckBridgeNF      = "bridge-nf-call-iptables"
	CheckBridgeNF6     = "bridge-nf-call-ip6tables"
	CheckIPForward     = "ip forwarding"
	CheckRouteLocalnet = "route_localnet"
)

// MaxClockSkew is how far the engine's clock may be from this host's before
// the clock check degrades: log timestamps, event lag and `since` filters
// come from the engine's clock.
const MaxClockSkew = time.Second

// Evaluate judges the facts.
func Evaluate(f Facts) Report {
	var r Report
	add := func(name string, s Status, format string, args ...any) {
		r.Checks = append(r.Checks, Check{Name: name, Status: s, Detail: fmt.Sprintf(format, args...)})
	}
	engineUp := f.PingErr == nil
	if engineUp {
		add(CheckEngine, OK, "%s answers (API %s negotiated)", f.EngineHost, f.APIVersion)
	} else {
		add(CheckEngine, Fail, "%s: %v", f.EngineHost, f.PingErr)
	}
	unknown := func(name string, err error) bool {
		switch {
		case !engineUp:
			add(name, Fail, "not checked: the engine does not answer")
		case err != nil:
			add(name, Fail, "%v", err)
		default:
			return false
		}
		return true
	}

	if !unknown(CheckVersion, f.VersionErr) {
		add(CheckVersion, OK, "Docker Engine %s, API %s (cri-compose needs %s or newer; newer-API features degrade below their version)",
			f.Version.Version, f.Version.APIVersion, dockerapi.MinAPIVersion)
	}
	if !unknown(CheckStorage, f.InfoErr) {
		switch d := f.Info.Driver; d {
		case "":
			add(CheckStorage, Degraded, "the engine reports none")
		case "vfs":
			add(CheckStorage, Degraded, "vfs copies every image layer for every container: slow starts and a lot of disk")
		default:
			add(CheckStorage, OK, "%s", d)
		}
	}
	if !unknown(CheckCgroups, f.InfoErr) {
		drv, ver := f.Info.CgroupDriver, f.Info.CgroupVersion
		if ver == "" {
			ver = "1" // engines before API 1.40 do not say
		}
		switch drv {
		case "none", "":
			add(CheckCgroups, Degraded, "no cgroup driver (cgroup v%s): resource limits and container stats are unavailable", ver)
		default:
			add(CheckCgroups, OK, "%s driver, cgroup v%s", drv, ver)
		}
	}

	evalCapabilities(f, add)

	if !unknown(CheckAppArmor, f.InfoErr) {
		if f.Host.AppArmor {
			add(CheckAppArmor, OK, "enabled in the engine")
		} else {
			add(CheckAppArmor, Degraded, "not enabled in the engine: containers asking for a localhost AppArmor profile are refused (unconfined and runtime/default run unconfined)")
		}
	}
	if !unknown(CheckSeccomp, f.InfoErr) {
		if opt, ok := securityOption(f.Info.SecurityOptions, "seccomp"); ok {
			add(CheckSeccomp, OK, "enabled in the engine (%s)", opt)
		} else {
			add(CheckSeccomp, Degraded, "not enabled in the engine: seccomp profiles (runtime/default, localhost) are not enforced")
		}
	}

	switch {
	case f.ComposeV2 != "":
		add(CheckComposeV2, OK, "%s: operators can use `docker compose ls/ps/logs` on pods", f.ComposeV2)
	default:
		add(CheckComposeV2, Degraded, "no docker-compose CLI plugin in %s: operators cannot use `docker compose` on pods (cri-compose itself does not need it); `make install-compose` in a cri-compose checkout installs it, or Docker's docker-compose-plugin package",
			strings.Join(f.PluginDirs, ", "))
	}
	switch {
	case f.ComposeV1 != "":
		kind := ""
		if f.ComposeV1Kind != "" {
			kind = " (" + f.ComposeV1Kind + ")"
		}
		add(CheckComposeV1, OK, "%s%s: lists a pod only when run in its project folder (<state dir>/projects/<project>)", f.ComposeV1, kind)
	case f.ComposeV2 != "":
		add(CheckComposeV1, OK, "no docker-compose on PATH (not needed: Compose v2 is there)")
	default:
		add(CheckComposeV1, Degraded, "no docker-compose on PATH either: operators have no Compose view of pods")
	}

	evalStateDir(f.StateDir, add)
	evalSocket(f.Socket, f.SocketServed, add)
	if f.EngineSocket.Path != "" {
		evalEngineSocket(f.EngineSocket, engineUp, add)
	}

	if !unknown(CheckClock, f.InfoErr) {
		evalClock(f, add)
	}
	evalClusterNetworking(f, add)
	return r
}

type addFunc func(name string, s Status, format string, args ...any)

func evalCapabilities(f Facts, add addFunc) {
	if f.Host.Capabilities == nil {
		why := "cannot read this process's bounding set (/proc/self/status)"
		if !f.EngineLocal {
			why = fmt.Sprintf("the engine (%s) is not on this host", f.EngineHost)
		}
		add(CheckCapabilities, Degraded, "not checked: %s; cri-compose assumes every capability", why)
		add(CheckOOMScoreAdj, Degraded, "not checked: assumed allowed")
		add(CheckPrivileged, Degraded, "not checked: assumed possible")
		return
	}
	var missing []string
	for _, c := range f.KernelCaps {
		if !slices.Contains(f.Host.Capabilities, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		add(CheckCapabilities, OK, "all %d capabilities the kernel and the engine know", len(f.KernelCaps))
	} else {
		add(CheckCapabilities, Degraded, "missing %d of the %d the kernel and the engine know: %s", len(missing), len(f.KernelCaps), strings.Join(missing, ", "))
	}
	if f.Host.NegativeOOMScoreAdj {
		add(CheckOOMScoreAdj, OK, "allowed (CAP_SYS_RESOURCE is in the bounding set)")
	} else {
		add(CheckOOMScoreAdj, Degraded, "unavailable: CAP_SYS_RESOURCE is missing from the bounding set, so runc cannot lower oom_score_adj; negative values (pod sandboxes, Guaranteed pods) are raised to 0")
	}
	if f.Host.FullPrivileged {
		add(CheckPrivileged, OK, "full: privileged containers get every capability")
	} else {
		add(CheckPrivileged, Degraded, "full privileged is unavailable (the bounding set lacks %s): privileged containers get the %d capabilities the host has, unconfined, with every device",
			strings.Join(missing, ", "), len(f.Host.Capabilities))
	}
}

// securityOption finds "name=<name>,…" in the engine's security options.
func securityOption(opts []string, name string) (string, bool) {
	for _, o := range opts {
		for kv := range strings.SplitSeq(o, ",") {
			if kv == "name="+name {
				return o, true
			}
		}
	}
	return "", false
}

func describe(p PathInfo) string {
	s := fmt.Sprintf("%s %s %s", p.Path, p.Mode.String(), p.Owner)
	return strings.TrimSpace(s)
}

func evalStateDir(p PathInfo, add addFunc) {
	switch {
	case p.Path == "":
		add(CheckStateDir, Fail, "no state dir set")
	case p.Err != nil:
		add(CheckStateDir, Fail, "%v", p.Err)
	case !p.Exists && p.ParentWritable:
		add(CheckStateDir, OK, "%s does not exist yet; cri-compose creates it (%s is writable)", p.Path, p.Parent)
	case !p.Exists:
		add(CheckStateDir, Fail, "%s does not exist and %s is not writable by this user", p.Path, p.Parent)
	case !p.Mode.IsDir():
		add(CheckStateDir, Fail, "%s is not a folder", describe(p))
	case !p.Writable:
		add(CheckStateDir, Fail, "%s is not writable by this user", describe(p))
	case p.Mode.Perm()&0o002 != 0:
		add(CheckStateDir, Degraded, "%s is writable by everyone: anyone can edit the compose files", describe(p))
	case p.Mode.Perm()&0o007 != 0:
		add(CheckStateDir, Degraded, "%s is open to other users, and its compose files hold the pods' environment values: cri-compose closes it (0700, 0750 with --socket-group) when it starts", describe(p))
	default:
		add(CheckStateDir, OK, "%s, writable", describe(p))
	}
}

func evalSocket(p PathInfo, served bool, add addFunc) {
	switch {
	case p.Path == "":
		add(CheckSocket, Fail, "no CRI socket set")
	case p.Err != nil:
		add(CheckSocket, Fail, "%v", p.Err)
	case !p.Exists:
		add(CheckSocket, Degraded, "%s does not exist: cri-compose is not running (it creates the socket mode 0660)", p.Path)
	case p.Mode.Type() != fs.ModeSocket:
		add(CheckSocket, Fail, "%s is not a socket", describe(p))
	case p.Mode.Perm()&0o006 != 0:
		add(CheckSocket, Fail, "%s: anyone on the host can drive the runtime (expected 0660)", describe(p))
	case !served:
		add(CheckSocket, Degraded, "%s: stale, nobody serves it (cri-compose replaces it when it starts)", describe(p))
	default:
		add(CheckSocket, OK, "%s, served", describe(p))
	}
}

func evalEngineSocket(p PathInfo, reached bool, add addFunc) {
	switch {
	case p.Err != nil:
		add(CheckEngineSocket, Fail, "%v", p.Err)
	case !p.Exists:
		add(CheckEngineSocket, Fail, "%s does not exist: the engine is not running", p.Path)
	case p.Mode.Perm()&0o006 != 0:
		add(CheckEngineSocket, Degraded, "%s: anyone on the host can drive the engine", describe(p))
	case !reached:
		add(CheckEngineSocket, Fail, "%s: no answer, or no permission", describe(p))
	default:
		add(CheckEngineSocket, OK, "%s", describe(p))
	}
}

func evalClock(f Facts, add addFunc) {
	t, err := time.Parse(time.RFC3339Nano, f.Info.SystemTime)
	if err != nil {
		add(CheckClock, Degraded, "the engine reports no usable time (%q)", f.Info.SystemTime)
		return
	}
	rtt := f.InfoReceived.Sub(f.InfoSent)
	mid := f.InfoSent.Add(rtt / 2)
	skew := t.Sub(mid)
	abs := max(skew, -skew)
	dir := "ahead of"
	if skew < 0 {
		dir = "behind"
	}
	msg := fmt.Sprintf("engine clock %v %s this host's (±%v)", abs.Round(time.Millisecond), dir, (rtt / 2).Round(time.Millisecond))
	if abs-rtt/2 > MaxClockSkew {
		add(CheckClock, Degraded, "%s: log timestamps and event lag are off by as much", msg)
		return
	}
	add(CheckClock, OK, "%s", msg)
}

// evalClusterNetworking judges the sysctls that kube-proxy and an overlay
// need on the node. A node without them still runs pods, so they degrade
// at worst; each detail says what breaks and how to fix it.
func evalClusterNetworking(f Facts, add addFunc) {
	if !f.EngineLocal {
		why := fmt.Sprintf("not checked: the engine (%s) is not on this host", f.EngineHost)
		add(CheckBridgeNF, Degraded, "%s; its host needs br_netfilter loaded and %s=1 for Services", why, SysctlBridgeNFIPTables)
		add(CheckBridgeNF6, Degraded, "%s; its host needs %s=1 for Services over IPv6", why, SysctlBridgeNFIP6Tables)
		add(CheckIPForward, Degraded, "%s; its host needs %s=1 to route pods' traffic", why, SysctlIPForward)
		add(CheckRouteLocalnet, OK, "%s", why)
		return
	}
	bridgeNF := func(name, sysctl, family string) {
		const breaks = "Services: replies from a pod on the same bridge skip kube-proxy's NAT (the client drops them), and NetworkPolicy rules miss traffic between pods on it"
		switch v, ok := f.Sysctls[sysctl]; {
		case !f.BridgeNetfilter:
			add(name, Degraded, "br_netfilter is not loaded (no /proc/sys/net/bridge): %s%s; fix: modprobe br_netfilter (and name it in /etc/modules-load.d/ to keep it), then sysctl -w %s=1",
				breaks, family, sysctl)
		case !ok:
			add(name, Degraded, "cannot read %s: %s%s may break", sysctlPath(sysctl), breaks, family)
		case v == "1":
			add(name, OK, "%s=1: traffic between pods on the bridge goes through iptables%s (kube-proxy's Services)", sysctl, family)
		default:
			add(name, Degraded, "%s=%s: %s%s; fix: sysctl -w %s=1 (and in /etc/sysctl.d/ to keep it)", sysctl, v, breaks, family, sysctl)
		}
	}
	bridgeNF(CheckBridgeNF, SysctlBridgeNFIPTables, "")
	var v6 []string
	for _, p := range f.PodSubnets {
		if p.Addr().Is6() {
			v6 = append(v6, p.String())
		}
	}
	if len(v6) > 0 {
		bridgeNF(CheckBridgeNF6, SysctlBridgeNFIP6Tables, " (IPv6: "+strings.Join(v6, ", ")+")")
	} else {
		add(CheckBridgeNF6, OK, "not needed: the pod network has no IPv6 subnet (a dual-stack pod CIDR gives it one)")
	}

	switch v, ok := f.Sysctls[SysctlIPForward]; {
	case !ok:
		add(CheckIPForward, Degraded, "cannot read %s: pods may not reach beyond this host", sysctlPath(SysctlIPForward))
	case v == "1":
		add(CheckIPForward, OK, "%s=1: this host routes pods' traffic, off the host and from other hosts' pods", SysctlIPForward)
	default:
		add(CheckIPForward, Degraded, "%s=%s: pods cannot reach beyond this host, nor pods on other hosts reach them through an overlay; fix: sysctl -w %s=1 (and in /etc/sysctl.d/ to keep it; dockerd sets it unless --ip-forward=false)",
			SysctlIPForward, v, SysctlIPForward)
	}

	// kube-proxy's iptables mode sets it to serve NodePorts on 127.0.0.1
	// (unless --iptables-localhost-nodeports=false): fine either way.
	switch v, ok := f.Sysctls[SysctlRouteLocalnet]; {
	case !ok:
		add(CheckRouteLocalnet, OK, "cannot read %s (kube-proxy's iptables mode sets it for NodePorts on 127.0.0.1)", sysctlPath(SysctlRouteLocalnet))
	case v == "1":
		add(CheckRouteLocalnet, OK, "%s=1: NodePorts answer on 127.0.0.1 (kube-proxy's iptables mode sets it)", SysctlRouteLocalnet)
	default:
		add(CheckRouteLocalnet, OK, "%s=%s: NodePorts do not answer on 127.0.0.1 until kube-proxy's iptables mode sets it (fine either way)", SysctlRouteLocalnet, v)
	}
}
