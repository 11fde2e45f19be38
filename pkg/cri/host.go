package cri

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/system"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// capNames are the Linux capabilities by bit number.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// hostFacts gathers what the mapping must respect about the engine's host:
// its capability bounding set, whether
// privileged really works, and AppArmor. The bounding set is read here only
// when the engine is local; for a remote engine nothing is clamped.
func hostFacts(info system.Info, local bool) sandbox.Host {
	var h sandbox.Host
	for _, o := range info.SecurityOptions {
		if strings.Contains(o, "name=apparmor") {
			h.AppArmor = true
		}
	}
	if !local {
		h.FullPrivileged = true
		h.NegativeOOMScoreAdj = true
		return h
	}
	bnd, ok := capBound("/proc/self/status")
	if !ok {
		h.FullPrivileged = true
		h.NegativeOOMScoreAdj = true
		return h
	}
	// Engines before 23.0 refuse the capabilities their capability list
	// predates (CAP_PERFMON, CAP_BPF, CAP_CHECKPOINT_RESTORE), even when the
	// kernel has them: never hand those to such an engine.
	last := min(lastCap(), engineLastCap(info.ServerVersion))
	h.FullPrivileged = true
	for bit := 0; bit <= last && bit < len(capNames); bit++ {
		if bnd&(1<<uint(bit)) != 0 {
			h.Capabilities = append(h.Capabilities, capNames[bit])
		} else {
			h.FullPrivileged = false
		}
	}
	h.NegativeOOMScoreAdj = bnd&(1<<24) != 0 // CAP_SYS_RESOURCE
	return h
}

// engineLastCap is the highest capability number the engine of version v
// accepts in CapAdd.
func engineLastCap(v string) int {
	var major int
	if _, err := fmt.Sscanf(v, "%d.", &major); err == nil && major > 0 && major < 23 {
		return 37 // CAP_AUDIT_READ
	}
	return len(capNames) - 1
}

func capBound(path string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// lastCap is the kernel's highest capability number.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return len(capNames) - 1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return len(capNames) - 1
	}
	return n
}

// --- exported for cri-compose doctor (pkg/doctor) ---

// HostFacts reports what the runtime will respect about the engine's host,
// exactly as it decides it when it prepares the engine: the capabilities
// of the bounding set (nil when not read: a remote engine or no
// /proc/self/status), whether privileged containers get every capability,
// whether a negative oom_score_adj is allowed, and AppArmor.
func HostFacts(info system.Info, local bool) sandbox.Host { return hostFacts(info, local) }

// KernelCapabilities names the capabilities this kernel knows, up to
// /proc/sys/kernel/cap_last_cap.
func KernelCapabilities() []string {
	return append([]string(nil), capNames[:min(lastCap()+1, len(capNames))]...)
}

// EngineCapabilities names the capabilities both this kernel and the engine
// described by info know: the most a container can be given here.
func EngineCapabilities(info system.Info) []string {
	return append([]string(nil), capNames[:min(lastCap(), engineLastCap(info.ServerVersion))+1]...)
}
