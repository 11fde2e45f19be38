package vk

import (
	"bufio"
	"encoding/json"
	"os"
	"runtime"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// hostInfo is what the Node reports about the machine the pods run on.
//
// CRI has no call for the runtime host's CPUs and memory. vk-cri takes
// them from the runtime's verbose Status info when it offers them (keys
// "ncpu" and "memTotal" in a JSON info value, as `docker info` names
// them), and otherwise from this host's /proc: vk-cri runs on the
// runtime's host for now (the pods' volume files must be there too).
type hostInfo struct {
	cpus          int64
	memoryBytes   int64
	storageBytes  int64 // of the state dir's file system
	kernel        string
	osImage       string
	machineID     string
	bootID        string
	fromRuntime   bool
	architecture  string
	operatingSyst string
	// stagesMounts: the runtime copies host-path mounts to its engine's
	// host (cri-compose's "stageMounts" info, a remote engine), so the
	// volumes' files are written there too.
	stagesMounts bool
	// podLevelResources: the runtime enforces a sandbox's pod-level
	// resources (cri-compose's "podLevelResources" info, with
	// "podLevelResourcesWhyNot" when it cannot); a runtime that does not
	// say cannot, as far as vk-cri knows.
	podLevelResources bool
	podLevelWhyNot    string
}

func readHostInfo(stateDir string, statusInfo map[string]string) hostInfo {
	h := hostInfo{
		cpus:          int64(runtime.NumCPU()),
		kernel:        firstLine("/proc/sys/kernel/osrelease"),
		osImage:       osRelease(),
		machineID:     firstLine("/etc/machine-id"),
		bootID:        firstLine("/proc/sys/kernel/random/boot_id"),
		architecture:  runtime.GOARCH,
		operatingSyst: runtime.GOOS,
	}
	if m := memTotal(); m > 0 {
		h.memoryBytes = m
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(stateDir, &fs); err == nil {
		h.storageBytes = int64(fs.Blocks) * fs.Bsize
	}
	for _, v := range statusInfo {
		var info map[string]any
		if json.Unmarshal([]byte(v), &info) != nil {
			continue
		}
		if n, ok := info["ncpu"].(float64); ok && n > 0 {
			h.cpus, h.fromRuntime = int64(n), true
		}
		if n, ok := info["memTotal"].(float64); ok && n > 0 {
			h.memoryBytes, h.fromRuntime = int64(n), true
		}
		if b, ok := info["stageMounts"].(bool); ok && b {
			h.stagesMounts = true
		}
		if b, ok := info["podLevelResources"].(bool); ok {
			h.podLevelResources = b
			h.podLevelWhyNot, _ = info["podLevelResourcesWhyNot"].(string)
		}
	}
	return h
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(s)
}

func osRelease() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return runtime.GOOS
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return runtime.GOOS
}

// memTotal is MemTotal of /proc/meminfo in bytes (0: unknown).
func memTotal() int64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemTotalBytes == nil {
		return 0
	}
	return int64(*mi.MemTotalBytes)
}
