package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListMetricDescriptors describes the cAdvisor-named metrics that
// ListPodSandboxMetrics returns (kubelet's /metrics/cadvisor when it takes
// pod and container stats from the runtime). Labels follow containerd:
// pod, namespace, container, id, image, then the metric's own.
func (s *Server) ListMetricDescriptors(ctx context.Context, _ *runtime.ListMetricDescriptorsRequest) (*runtime.ListMetricDescriptorsResponse, error) {
	return &runtime.ListMetricDescriptorsResponse{Descriptors: metricDescriptors}, nil
}

var (
	baseLabelKeys    = []string{"pod", "namespace", "container", "id", "image"}
	networkLabelKeys = withKeys(baseLabelKeys, "interface")
	failureLabelKeys = withKeys(baseLabelKeys, "failure_type", "scope")
	fsLabelKeys      = withKeys(baseLabelKeys, "device")
)

func withKeys(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

// The metric names, as cAdvisor spells them.
const (
	mCPUUsage         = "container_cpu_usage_seconds_total"
	mMemoryUsage      = "container_memory_usage_bytes"
	mMemoryWorkingSet = "container_memory_working_set_bytes"
	mMemoryRSS        = "container_memory_rss"
	mMemoryCache      = "container_memory_cache"
	mMemoryFailures   = "container_memory_failures_total"
	mSpecMemoryLimit  = "container_spec_memory_limit_bytes"
	mProcesses        = "container_processes"
	mFsUsage          = "container_fs_usage_bytes"
	mFsInodesUsed     = "container_fs_inodes_used"
	mLastSeen         = "container_last_seen"
	mStartTime        = "container_start_time_seconds"
	mNetRxBytes       = "container_network_receive_bytes_total"
	mNetRxPackets     = "container_network_receive_packets_total"
	mNetRxErrors      = "container_network_receive_errors_total"
	mNetRxDropped     = "container_network_receive_packets_dropped_total"
	mNetTxBytes       = "container_network_transmit_bytes_total"
	mNetTxPackets     = "container_network_transmit_packets_total"
	mNetTxErrors      = "container_network_transmit_errors_total"
	mNetTxDropped     = "container_network_transmit_packets_dropped_total"
)

var metricDescriptors = []*runtime.MetricDescriptor{
	{Name: mCPUUsage, Help: "Cumulative cpu time consumed in seconds.", LabelKeys: baseLabelKeys},
	{Name: mMemoryUsage, Help: "Current memory usage in bytes, including all memory regardless of when it was accessed.", LabelKeys: baseLabelKeys},
	{Name: mMemoryWorkingSet, Help: "Current working set in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemoryRSS, Help: "Size of RSS in bytes.", LabelKeys: baseLabelKeys},
	{Name: mMemoryCache, Help: "Number of bytes of page cache memory.", LabelKeys: baseLabelKeys},
	{Name: mMemoryFailures, Help: "Cumulative count of memory allocation failures.", LabelKeys: failureLabelKeys},
	{Name: mSpecMemoryLimit, Help: "Memory limit for the container.", LabelKeys: baseLabelKeys},
	{Name: mProcesses, Help: "Number of processes running inside the container.", LabelKeys: baseLabelKeys},
	{Name: mFsUsage, Help: "Number of bytes that are consumed by the container on this filesystem.", LabelKeys: fsLabelKeys},
	{Name: mFsInodesUsed, Help: "Number of inodes that are consumed by the container on this filesystem.", LabelKeys: fsLabelKeys},
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
