package vk

import (
	"context"
	"time"

	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRI call metrics. k8s.io/cri-client takes no gRPC dial options, so no
// client interceptor (go-grpc-middleware's, say) can be put on its
// connection; the services are wrapped instead, one method each, which
// also names the calls as kubelet's own CRI metrics do.

// observeCRI records one call's latency and result code.
func observeCRI(method string, start time.Time, err error) {
	criRequests.WithLabelValues(method, status.Code(err).String()).Inc()
	criDuration.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

func timed[T any](method string, f func() (T, error)) (T, error) {
	start := time.Now()
	v, err := f()
	observeCRI(method, start, err)
	return v, err
}

func timedErr(method string, f func() error) error {
	start := time.Now()
	err := f()
	observeCRI(method, start, err)
	return err
}

// instrumentedRuntime counts and times the calls of a RuntimeService.
type instrumentedRuntime struct{ rs internalapi.RuntimeService }

// instrumentedImages counts and times the calls of an ImageManagerService.
type instrumentedImages struct {
	is internalapi.ImageManagerService
}

// Instrument wraps r's services so that every CRI call is counted and timed
// in vk-cri's metrics.
func Instrument(r *Runtime) *Runtime {
	return &Runtime{RuntimeService: instrumentedRuntime{r.RuntimeService}, Images: instrumentedImages{r.Images}}
}

func (i instrumentedRuntime) Version(ctx context.Context, apiVersion string) (*runtimeapi.VersionResponse, error) {
	return timed("Version", func() (*runtimeapi.VersionResponse, error) { return i.rs.Version(ctx, apiVersion) })
}

func (i instrumentedRuntime) CreateContainer(ctx context.Context, podSandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return timed("CreateContainer", func() (string, error) { return i.rs.CreateContainer(ctx, podSandboxID, config, sandboxConfig) })
}

func (i instrumentedRuntime) StartContainer(ctx context.Context, containerID string) error {
	return timedErr("StartContainer", func() error { return i.rs.StartContainer(ctx, containerID) })
}

func (i instrumentedRuntime) StopContainer(ctx context.Context, containerID string, timeout int64) error {
	return timedErr("StopContainer", func() error { return i.rs.StopContainer(ctx, containerID, timeout) })
}

func (i instrumentedRuntime) RemoveContainer(ctx context.Context, containerID string) error {
	return timedErr("RemoveContainer", func() error { return i.rs.RemoveContainer(ctx, containerID) })
}

func (i instrumentedRuntime) ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return timed("ListContainers", func() ([]*runtimeapi.Container, error) { return i.rs.ListContainers(ctx, filter) })
}

func (i instrumentedRuntime) ContainerStatus(ctx context.Context, containerID string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	return timed("ContainerStatus", func() (*runtimeapi.ContainerStatusResponse, error) {
		return i.rs.ContainerStatus(ctx, containerID, verbose)
	})
}

func (i instrumentedRuntime) UpdateContainerResources(ctx context.Context, containerID string, resources *runtimeapi.ContainerResources) error {
	return timedErr("UpdateContainerResources", func() error { return i.rs.UpdateContainerResources(ctx, containerID, resources) })
}

func (i instrumentedRuntime) ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) ([]byte, []byte, error) {
	start := time.Now()
	stdout, stderr, err := i.rs.ExecSync(ctx, containerID, cmd, timeout)
	observeCRI("ExecSync", start, err)
	return stdout, stderr, err
}

func (i instrumentedRuntime) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return timed("Exec", func() (*runtimeapi.ExecResponse, error) { return i.rs.Exec(ctx, req) })
}

func (i instrumentedRuntime) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return timed("Attach", func() (*runtimeapi.AttachResponse, error) { return i.rs.Attach(ctx, req) })
}

func (i instrumentedRuntime) ReopenContainerLog(ctx context.Context, containerID string) error {
	return timedErr("ReopenContainerLog", func() error { return i.rs.ReopenContainerLog(ctx, containerID) })
}

func (i instrumentedRuntime) CheckpointContainer(ctx context.Context, options *runtimeapi.CheckpointContainerRequest) error {
	return timedErr("CheckpointContainer", func() error { return i.rs.CheckpointContainer(ctx, options) })
}

// GetContainerEvents is a stream that lasts as long as the connection: it
// is counted when it ends, not timed.
func (i instrumentedRuntime) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, cb func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	err := i.rs.GetContainerEvents(ctx, ch, cb)
	criRequests.WithLabelValues("GetContainerEvents", status.Code(err).String()).Inc()
	return err
}

func (i instrumentedRuntime) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, runtimeHandler string) (string, error) {
	return timed("RunPodSandbox", func() (string, error) { return i.rs.RunPodSandbox(ctx, config, runtimeHandler) })
}

func (i instrumentedRuntime) StopPodSandbox(ctx context.Context, podSandboxID string) error {
	return timedErr("StopPodSandbox", func() error { return i.rs.StopPodSandbox(ctx, podSandboxID) })
}

func (i instrumentedRuntime) RemovePodSandbox(ctx context.Context, podSandboxID string) error {
	return timedErr("RemovePodSandbox", func() error { return i.rs.RemovePodSandbox(ctx, podSandboxID) })
}

func (i instrumentedRuntime) PodSandboxStatus(ctx context.Context, podSandboxID string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	return timed("PodSandboxStatus", func() (*runtimeapi.PodSandboxStatusResponse, error) {
		return i.rs.PodSandboxStatus(ctx, podSandboxID, verbose)
	})
}

func (i instrumentedRuntime) ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return timed("ListPodSandbox", func() ([]*runtimeapi.PodSandbox, error) { return i.rs.ListPodSandbox(ctx, filter) })
}

func (i instrumentedRuntime) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return timed("PortForward", func() (*runtimeapi.PortForwardResponse, error) { return i.rs.PortForward(ctx, req) })
}

func (i instrumentedRuntime) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	return timed("UpdatePodSandboxResources", func() (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
		return i.rs.UpdatePodSandboxResources(ctx, req)
	})
}

func (i instrumentedRuntime) CheckpointPod(ctx context.Context, options *runtimeapi.CheckpointPodRequest) error {
	return timedErr("CheckpointPod", func() error { return i.rs.CheckpointPod(ctx, options) })
}

func (i instrumentedRuntime) RestorePod(ctx context.Context, options *runtimeapi.RestorePodRequest) (*runtimeapi.RestorePodResponse, error) {
	return timed("RestorePod", func() (*runtimeapi.RestorePodResponse, error) { return i.rs.RestorePod(ctx, options) })
}

func (i instrumentedRuntime) ContainerStats(ctx context.Context, containerID string) (*runtimeapi.ContainerStats, error) {
	return timed("ContainerStats", func() (*runtimeapi.ContainerStats, error) { return i.rs.ContainerStats(ctx, containerID) })
}

func (i instrumentedRuntime) ListContainerStats(ctx context.Context, filter *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	return timed("ListContainerStats", func() ([]*runtimeapi.ContainerStats, error) { return i.rs.ListContainerStats(ctx, filter) })
}

func (i instrumentedRuntime) PodSandboxStats(ctx context.Context, podSandboxID string) (*runtimeapi.PodSandboxStats, error) {
	return timed("PodSandboxStats", func() (*runtimeapi.PodSandboxStats, error) { return i.rs.PodSandboxStats(ctx, podSandboxID) })
}

func (i instrumentedRuntime) ListPodSandboxStats(ctx context.Context, filter *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	return timed("ListPodSandboxStats", func() ([]*runtimeapi.PodSandboxStats, error) { return i.rs.ListPodSandboxStats(ctx, filter) })
}

func (i instrumentedRuntime) ListMetricDescriptors(ctx context.Context) ([]*runtimeapi.MetricDescriptor, error) {
	return timed("ListMetricDescriptors", func() ([]*runtimeapi.MetricDescriptor, error) { return i.rs.ListMetricDescriptors(ctx) })
}

func (i instrumentedRuntime) ListPodSandboxMetrics(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
	return timed("ListPodSandboxMetrics", func() ([]*runtimeapi.PodSandboxMetrics, error) { return i.rs.ListPodSandboxMetrics(ctx) })
}

func (i instrumentedRuntime) UpdateRuntimeConfig(ctx context.Context, runtimeConfig *runtimeapi.RuntimeConfig) error {
	return timedErr("UpdateRuntimeConfig", func() error { return i.rs.UpdateRuntimeConfig(ctx, runtimeConfig) })
}

func (i instrumentedRuntime) Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error) {
	return timed("Status", func() (*runtimeapi.StatusResponse, error) { return i.rs.Status(ctx, verbose) })
}

func (i instrumentedRuntime) RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error) {
	return timed("RuntimeConfig", func() (*runtimeapi.RuntimeConfigResponse, error) { return i.rs.RuntimeConfig(ctx) })
}

func (i instrumentedRuntime) Close(ctx context.Context) error { return i.rs.Close(ctx) }

func (i instrumentedImages) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return timed("ListImages", func() ([]*runtimeapi.Image, error) { return i.is.ListImages(ctx, filter) })
}

func (i instrumentedImages) ImageStatus(ctx context.Context, image *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	return timed("ImageStatus", func() (*runtimeapi.ImageStatusResponse, error) { return i.is.ImageStatus(ctx, image, verbose) })
}

func (i instrumentedImages) PullImage(ctx context.Context, image *runtimeapi.ImageSpec, auth *runtimeapi.AuthConfig, podSandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	return timed("PullImage", func() (string, error) { return i.is.PullImage(ctx, image, auth, podSandboxConfig) })
}

func (i instrumentedImages) RemoveImage(ctx context.Context, image *runtimeapi.ImageSpec) error {
	return timedErr("RemoveImage", func() error { return i.is.RemoveImage(ctx, image) })
}

func (i instrumentedImages) ImageFsInfo(ctx context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return timed("ImageFsInfo", func() (*runtimeapi.ImageFsInfoResponse, error) { return i.is.ImageFsInfo(ctx) })
}

func (i instrumentedImages) Close(ctx context.Context) error { return i.is.Close(ctx) }
