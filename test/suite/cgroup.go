package suite

import (
	"os"
	"path/filepath"
	"strings"
)

// CgroupLimitsScript, run by sh inside a container, prints what the
// container sees of its own limits: on cgroup v2 "<memory.max> <quota>
// <period>", on v1 "<memory.limit_in_bytes> <cfs_quota_us> <cfs_period_us>",
// so a test reads the same line on either.
const CgroupLimitsScript = `if [ -f /sys/fs/cgroup/memory.max ]; then echo "$(cat /sys/fs/cgroup/memory.max) $(cat /sys/fs/cgroup/cpu.max)"; ` +
	`else echo "$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"; fi`

// cgroupRoot is where this host mounts its cgroups: one folder per
// controller on cgroup v1, the unified tree on v2.
const cgroupRoot = "/sys/fs/cgroup"

func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
}

// HostCgroupLimits reads, on this host, the memory limit and the CPU
// quota and period of the cgroup at path (a cgroupfs path, as an engine's
// cgroup parent): "<memory.max>" and "<quota> <period>" on cgroup v2,
// "<memory.limit_in_bytes>" and "<cfs_quota_us> <cfs_period_us>" on v1.
func HostCgroupLimits(path string) (mem, cpu string, err error) {
	read := func(parts ...string) string {
		if err != nil {
			return ""
		}
		var b []byte
		b, err = os.ReadFile(filepath.Join(append([]string{cgroupRoot}, parts...)...))
		return strings.TrimSpace(string(b))
	}
	if cgroupV2() {
		mem, cpu = read(path, "memory.max"), read(path, "cpu.max")
	} else {
		mem = read("memory", path, "memory.limit_in_bytes")
		cpu = read("cpu", path, "cpu.cfs_quota_us") + " " + read("cpu", path, "cpu.cfs_period_us")
	}
	return mem, cpu, err
}

// HostCgroupPaths are the folders of the cgroup at path on this host: one
// per controller on cgroup v1, one on v2.
func HostCgroupPaths(path string) []string {
	if cgroupV2() {
		return []string{filepath.Join(cgroupRoot, path)}
	}
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", path))
	return dirs
}
