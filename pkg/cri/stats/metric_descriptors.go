package stats

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// MetricDescriptors describe the cAdvisor-named metrics that Metrics
// returns (kubelet's /metrics/cadvisor when it takes pod and container
// stats from the runtime). Labels follow containerd: pod, namespace,
// container, id, image, then the metric's own. Every metric Metrics can
// return is described, and carries exactly its descriptor's labels.
// container_fs_inodes_used is described only where writable layers are
// measured here (countsInodes): the engine counts their bytes, never their
// inodes, and a described metric that never comes is a promise broken.
func (c *Collector) MetricDescriptors(ctx context.Context) []*runtime.MetricDescriptor {
	if c.layers.countsInodes(ctx) {
		return metricDescriptors
	}
	out := make([]*runtime.MetricDescriptor, 0, len(metricDescriptors))
	for _, d := range metricDescriptors {
		if d.GetName() != mFsInodesUsed {
			out = append(out, d)
		}
	}
	return out
}

var (
	baseLabelKeys    = []string{"pod", "namespace", "container", "id", "image"}
	networkLabelKeys = withKeys(baseLabelKeys, "interface")
	failureLabelKeys = withKeys(baseLabelKeys, "failure_type", "scope")
	fsLabelKeys      = withKeys(baseLabelKeys, "device")
	blkioLabelKeys   = withKeys(baseLabelKeys, "device", "major", "minor", "operation")
)

func withKeys(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// The metric names, as cAdvisor spells them.
const (
	mCPUUsage          = "container_cpu_usage_seconds_total"
	mCPUUser           = "container_cpu_user_seconds_total"
	mCPUSystem         = "container_cpu_system_seconds_total"
	mCFSPeriods        = "container_cpu_cfs_periods_total"
	mCFSThrottled      = "container_cpu_cfs_throttled_periods_total"
	mCFSThrottledSecs  = "container_cpu_cfs_throttled_seconds_total"
	mMemoryUsage       = "container_memory_usage_bytes"
	mMemoryWorkingSet  = "container_memory_working_set_bytes"
	mMemoryRSS         = "container_memory_rss"
	mMemoryCache       = "container_memory_cache"
	mMemoryMappedFile  = "container_memory_mapped_file"
	mMemorySwap        = "container_memory_swap"
	mMemoryKernel      = "container_memory_kernel_usage"
	mMemoryMaxUsage    = "container_memory_max_usage_bytes"
	mMemoryFailcnt     = "container_memory_failcnt"
	mMemoryFailures    = "container_memory_failures_total"
	mOOMEvents         = "container_oom_events_total"
	mSpecMemoryLimit   = "container_spec_memory_limit_bytes"
	mSpecMemorySwap    = "container_spec_memory_swap_limit_bytes"
	mSpecMemoryReserve = "container_spec_memory_reservation_limit_bytes"
	mSpecCPUPeriod     = "container_spec_cpu_period"
	mSpecCPUQuota      = "container_spec_cpu_quota"
	mSpecCPUShares     = "container_spec_cpu_shares"
	mProcesses         = "container_processes"
	mThreads           = "container_threads"
	mThreadsMax        = "container_threads_max"
	mFileDescriptors   = "container_file_descriptors"
	mSockets           = "container_sockets"
	mFsUsage           = "container_fs_usage_bytes"
	mFsInodesUsed      = "container_fs_inodes_used"
	mFsLimit           = "container_fs_limit_bytes"
	mFsInodesTotal     = "container_fs_inodes_total"
	mFsInodesFree      = "container_fs_inodes_free"
	mFsReadsBytes      = "container_fs_reads_bytes_total"
	mFsReads           = "container_fs_reads_total"
	mFsWritesBytes     = "container_fs_writes_bytes_total"
	mFsWrites          = "container_fs_writes_total"
	mBlkioUsage        = "container_blkio_device_usage_total"
	mLastSeen          = "container_last_seen"
	mStartTime         = "container_start_time_seconds"
	mNetRxBytes        = "container_network_receive_bytes_total"
	mNetRxPackets      = "container_network_receive_packets_total"
	mNetRxErrors       = "container_network_receive_errors_total"
	mNetRxDropped      = "container_network_receive_packets_dropped_total"
	mNetTxBytes        = "container_network_transmit_bytes_total"
	mNetTxPackets      = "container_network_transmit_packets_total"
	mNetTxErrors       = "container_network_transmit_errors_total"
	mNetTxDropped      = "container_network_transmit_packets_dropped_total"
)

var metricDescriptors = []*runtime.MetricDescriptor{
	{Name: mCPUUsage, Help: "Cumulative cpu time consumed in seconds.", LabelKeys: baseLabelKeys},
	{Name: mCPUUser, Help: "Cumulative user cpu time consumed in seconds.", LabelKeys: baseLabelKeys},
	{Name: mCPUSystem, Help: "Cumulative system cpu time consumed in seconds.", LabelKeys: baseLabelKeys},
	{Name: mCFSPeriods, Help: "Number of elapsed enforcement period intervals.", LabelKeys: baseLabelKeys},
	{Name: mCFSThrottled, Help: "Number of throttled period intervals.", LabelKeys: baseLabelKeys},
	{Name: mCFSThrottledSecs, Help: "Total time duration the container has been throttled.", LabelKeys: baseLabelKeys},
	{Name: mMemoryUsage, Help: "Current memory usage in bytes, including all memory regardless of when it was accessed.", LabelKeys: baseLabelKeys},
	{Name: mMemoryWorkingSet, Help: "Current working set in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemoryRSS, Help: "Size of RSS in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemoryCache, Help: "Number of bytes of page cache memory.", LabelKeys: baseLabelKeys},
	{Name: mMemoryMappedFile, Help: "Size of memory mapped files in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemorySwap, Help: "Container swap usage in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemoryKernel, Help: "Size of kernel memory allocated in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemoryMaxUsage, Help: "Maximum memory usage recorded in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemoryFailcnt, Help: "Number of memory usage hits limits.", LabelKeys: baseLabelKeys},
	{Name: mMemoryFailures, Help: "Cumulative count of memory allocation failures.", LabelKeys: failureLabelKeys},
	{Name: mOOMEvents, Help: "Count of out of memory events observed for the container.", LabelKeys: baseLabelKeys},
	{Name: mSpecMemoryLimit, Help: "Memory limit for the container.", LabelKeys: baseLabelKeys},
	{Name: mSpecMemorySwap, Help: "Memory swap limit for the container.", LabelKeys: baseLabelKeys},
	{Name: mSpecMemoryReserve, Help: "Memory reservation limit for the container.", LabelKeys: baseLabelKeys},
	{Name: mSpecCPUPeriod, Help: "CPU period of the container.", LabelKeys: baseLabelKeys},
	{Name: mSpecCPUQuota, Help: "CPU quota of the container.", LabelKeys: baseLabelKeys},
	{Name: mSpecCPUShares, Help: "CPU share of the container.", LabelKeys: baseLabelKeys},
	{Name: mProcesses, Help: "Number of processes running inside the container.", LabelKeys: baseLabelKeys},
	{Name: mThreads, Help: "Number of threads running inside the container.", LabelKeys: baseLabelKeys},
	{Name: mThreadsMax, Help: "Maximum number of threads allowed inside the container, infinity if value is zero.", LabelKeys: baseLabelKeys},
	{Name: mFileDescriptors, Help: "Number of open file descriptors for the container.", LabelKeys: baseLabelKeys},
	{Name: mSockets, Help: "Number of open sockets for the container.", LabelKeys: baseLabelKeys},
	{Name: mFsUsage, Help: "Number of bytes that are consumed by the container on this filesystem.", LabelKeys: fsLabelKeys},
	{Name: mFsInodesUsed, Help: "Number of inodes that are consumed by the container on this filesystem.", LabelKeys: fsLabelKeys},
	{Name: mFsLimit, Help: "Number of bytes that can be consumed by the container on this filesystem.", LabelKeys: fsLabelKeys},
	{Name: mFsInodesTotal, Help: "Number of Inodes.", LabelKeys: fsLabelKeys},
	{Name: mFsInodesFree, Help: "Number of available Inodes.", LabelKeys: fsLabelKeys},
	{Name: mFsReadsBytes, Help: "Cumulative count of bytes read.", LabelKeys: fsLabelKeys},
	{Name: mFsReads, Help: "Cumulative count of reads completed.", LabelKeys: fsLabelKeys},
	{Name: mFsWritesBytes, Help: "Cumulative count of bytes written.", LabelKeys: fsLabelKeys},
	{Name: mFsWrites, Help: "Cumulative count of writes completed.", LabelKeys: fsLabelKeys},
	{Name: mBlkioUsage, Help: "Blkio device bytes usage.", LabelKeys: blkioLabelKeys},
	{Name: mLastSeen, Help: "Last time a container was seen by the exporter.", LabelKeys: baseLabelKeys},
	{Name: mStartTime, Help: "Start time of the container since unix epoch in seconds.", LabelKeys: baseLabelKeys},
	{Name: mNetRxBytes, Help: "Cumulative count of bytes received.", LabelKeys: networkLabelKeys},
	{Name: mNetRxPackets, Help: "Cumulative count of packets received.", LabelKeys: networkLabelKeys},
	{Name: mNetRxErrors, Help: "Cumulative count of errors encountered while receiving.", LabelKeys: networkLabelKeys},
	{Name: mNetRxDropped, Help: "Cumulative count of packets dropped while receiving.", LabelKeys: networkLabelKeys},
	{Name: mNetTxBytes, Help: "Cumulative count of bytes transmitted.", LabelKeys: networkLabelKeys},
	{Name: mNetTxPackets, Help: "Cumulative count of packets transmitted.", LabelKeys: networkLabelKeys},
	{Name: mNetTxErrors, Help: "Cumulative count of errors encountered while transmitting.", LabelKeys: networkLabelKeys},
	{Name: mNetTxDropped, Help: "Cumulative count of packets dropped while transmitting.", LabelKeys: networkLabelKeys},
}
