package suite

// CgroupLimitsScript, run by sh inside a container, prints what the
// container sees of its own limits: on cgroup v2 "<memory.max> <quota>
// <period>", on v1 "<memory.limit_in_bytes> <cfs_quota_us> <cfs_period_us>",
// so a test reads the same line on either.
const CgroupLimitsScript = `if [ -f /sys/fs/cgroup/memory.max ]; then echo "$(cat /sys/fs/cgroup/memory.max) $(cat /sys/fs/cgroup/cpu.max)"; ` +
	`else echo "$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"; fi`
