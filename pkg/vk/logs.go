package vk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"
	"k8s.io/klog/v2"
)

// GetContainerLogs streams a container's log from the CRI log file the
// runtime writes (its path is in ContainerStatus), with kubelet's own
// reader (k8s.io/cri-client/pkg/logs): the CRI format
// `<RFC3339Nano> <stream> <P|F> <text>` is parsed, partial lines joined,
// and follow, tail, since, timestamps and limitBytes applied as kubelet
// does. previous reads the container's run before the current one.
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	w := p.worker(namespace, podName)
	if w == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", namespace, podName)
	}
	pod := w.pod()
	cs, err := p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{
		labelPodUID: string(pod.UID), labelContainerName: containerName,
	}})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].CreatedAt > cs[j].CreatedAt })
	i := 0
	if opts.Previous {
		i = 1
	}
	if len(cs) <= i {
		what := "container"
		if opts.Previous {
			what = "previous terminated container"
		}
		return nil, errdefs.NotFoundf("%s %q in pod %s/%s not found", what, containerName, namespace, podName)
	}
	id := cs[i].Id
	st, err := p.rt.ContainerStatus(ctx, id, false)
	if err != nil {
		return nil, fmt.Errorf("container status %s: %w", id, err)
	}
	path := joinLogPath(p.podLogDir(pod), st.GetStatus().GetLogPath())
	if path == "" {
		return nil, errdefs.NotFoundf("container %q in pod %s/%s has no log", containerName, namespace, podName)
	}
	lo := &logs.LogOptions{Follow: opts.Follow, Timestamp: opts.Timestamps}
	if opts.Tail > 0 {
		n := int64(opts.Tail)
		lo.TailLines = &n
	}
	if opts.LimitBytes > 0 {
		n := int64(opts.LimitBytes)
		lo.LimitBytes = &n
	}
	switch {
	case !opts.SinceTime.IsZero():
		lo.Since = opts.SinceTime
	case opts.SinceSeconds > 0:
		lo.Since = p.clock.Now().Add(-time.Duration(opts.SinceSeconds) * time.Second)
	}
	pr, pw := io.Pipe()
	go func() {
		err := logs.ReadLogs(ctx, path, id, lo, p.rt.RuntimeService, pw, pw)
		if ctx.Err() != nil || errors.Is(err, io.ErrClosedPipe) {
			err = nil // the client went away: nothing to report
		}
		if err != nil {
			klog.V(2).InfoS("Reading container log", "container", id, "path", path, "err", err)
		}
		pw.CloseWithError(err)
	}()
	return readCloser{pr, func() { pr.Close() }}, nil
}

type readCloser struct {
	io.Reader
	close func()
}

func (r readCloser) Close() error { r.close(); return nil }
