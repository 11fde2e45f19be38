package vk

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Container log rotation, with the semantics of kubelet's container log
// manager: the runtime writes one CRI log file per container, and a
// container that logs forever would fill the disk. Every MonitorInterval
// each running container's log is checked; one of MaxSize or more is
// renamed to <log>.<timestamp>, the runtime is asked to reopen the path
// (CRI ReopenContainerLog), the rotated files before it are gzipped, and
// the oldest are removed so that at most MaxFiles remain, the live one
// included. kubectl logs reads the live file; kubelet's log reader follows
// it across the rename.
const (
	// rotatedTimeFormat, gzSuffix and tmpSuffix are kubelet's, so that log
	// shippers that know kubelet's rotated names read ours.
	rotatedTimeFormat = "20060102-150405"
	gzSuffix          = ".gz"
	tmpSuffix         = ".tmp"

	// minLogMonitorInterval is kubelet's lower bound: rotated names carry
	// the time in seconds, and two rotations within one would collide.
	minLogMonitorInterval = 3 * time.Second
)

// LogRotation is kubelet's container log policy
// (--container-log-max-size, -max-files, -max-workers, -monitor-interval).
type LogRotation struct {
	// MaxSize in bytes at which a log is rotated; 0 turns rotation off.
	MaxSize int64
	// MaxFiles a container keeps, the live log included (at least 2).
	MaxFiles int
	// MaxWorkers rotate that many containers' logs at once.
	MaxWorkers int
	// MonitorInterval is how often the logs' sizes are checked.
	MonitorInterval time.Duration
}

// DefaultLogRotation is kubelet's default policy.
var DefaultLogRotation = LogRotation{MaxSize: 10 << 20, MaxFiles: 5, MaxWorkers: 1, MonitorInterval: 10 * time.Second}

// Validate refuses what kubelet's configuration validation refuses.
func (r LogRotation) Validate() error {
	var errs []error
	if r.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("container log max size %d must not be negative", r.MaxSize))
	}
	if r.MaxSize == 0 {
		return errors.Join(errs...)
	}
	if r.MaxFiles < 2 {
		errs = append(errs, fmt.Errorf("container log max files %d must be greater than 1", r.MaxFiles))
	}
	if r.MaxWorkers < 1 {
		errs = append(errs, fmt.Errorf("container log max workers %d must be greater than or equal to 1", r.MaxWorkers))
	}
	if r.MonitorInterval < minLogMonitorInterval {
		errs = append(errs, fmt.Errorf("container log monitor interval %v must be a positive time duration greater than or equal to %v", r.MonitorInterval, minLogMonitorInterval))
	}
	return errors.Join(errs...)
}

// logRotator rotates the logs of this node's running containers.
type logRotator struct {
	p      *Provider
	policy LogRotation
	// mu keeps a round of rotation and the removal of a container's logs
	// apart, as kubelet's manager does: a log is never rotated while its
	// files are being removed.
	mu sync.Mutex
}

// rotateAll checks every running container of this node once, with
// MaxWorkers at a time. An error on one container doesn't stop the others.
func (r *logRotator) rotateAll(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cs, err := r.p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{labelNode: r.p.cfg.NodeName},
	})
	if err != nil {
		klog.ErrorS(err, "Listing containers for log rotation")
		return
	}
	work := make(chan *runtimeapi.Container)
	var wg sync.WaitGroup
	for range min(r.policy.MaxWorkers, len(cs)) {
		wg.Go(func() {
			for c := range work {
				if err := r.rotateIfFull(ctx, c); err != nil {
					klog.ErrorS(err, "Rotating container log", "container", c.Id,
						"pod", klog.KRef(c.Labels[labelPodNamespace], c.Labels[labelPodName]))
				}
			}
		})
	}
	for _, c := range cs {
		if ctx.Err() != nil {
			break
		}
		work <- c
	}
	close(work)
	wg.Wait()
}

func (r *logRotator) rotateIfFull(ctx context.Context, c *runtimeapi.Container) error {
	st, err := r.p.rt.ContainerStatus(ctx, c.Id, false)
	if err != nil {
		return fmt.Errorf("container status: %w", err)
	}
	if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil // it stopped since the list: it writes no more
	}
	l := c.Labels
	path := joinLogPath(r.p.logDirOf(l[labelPodNamespace], l[labelPodName], l[labelPodUID]), st.GetStatus().GetLogPath())
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A rename whose reopen failed and whose rename back failed too (or
		// someone removed the file): the runtime makes it again.
		if err := r.p.rt.ReopenContainerLog(ctx, c.Id); err != nil {
			return fmt.Errorf("reopen missing log %s: %w", path, err)
		}
		fi, err = os.Stat(path)
	}
	if err != nil {
		return err
	}
	if fi.Size() < r.policy.MaxSize {
		return nil
	}
	return r.rotate(ctx, c.Id, path)
}

// rotate prunes and compresses the rotated files, then rotates the live
// one. The newest rotated file stays uncompressed until the next rotation:
// a reader following the log may still be draining it.
func (r *logRotator) rotate(ctx context.Context, id, path string) error {
	to := path + "." + r.p.clock.Now().Format(rotatedTimeFormat)
	for _, f := range []string{to, to + gzSuffix} {
		if _, err := os.Lstat(f); err == nil {
			return fmt.Errorf("rotated log %s exists already: rotating again next round", f)
		}
	}
	rotated, err := rotatedLogs(path)
	if err != nil {
		return err
	}
	rotated = removeUnusedLogs(rotated)
	// The live file and the one about to be rotated count too.
	keep := max(r.policy.MaxFiles-2, 0)
	for len(rotated) > keep {
		if err := os.Remove(rotated[0]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove old log: %w", err)
		}
		rotated = rotated[1:]
	}
	for _, f := range rotated {
		if !strings.HasSuffix(f, gzSuffix) {
			if err := compressLog(f); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(path, to); err != nil {
		return fmt.Errorf("rotate log: %w", err)
	}
	if err := r.p.rt.ReopenContainerLog(ctx, id); err != nil {
		// Put it back, so that the runtime's writes stay at the path and the
		// next round tries again.
		if rerr := os.Rename(to, path); rerr != nil {
			klog.ErrorS(rerr, "Renaming a rotated log back", "rotated", to, "log", path, "container", id)
		}
		return fmt.Errorf("reopen log: %w", err)
	}
	klog.V(3).InfoS("Rotated container log", "container", id, "log", path, "rotated", to)
	return nil
}

// rotatedLogs are the rotated files of the log at path, oldest first (the
// timestamps sort as strings).
func rotatedLogs(path string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(path) + "."
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			out = append(out, filepath.Join(filepath.Dir(path), e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

// removeUnusedLogs removes what an interrupted compression left: its
// temporary file, or the uncompressed original beside a finished .gz.
func removeUnusedLogs(logs []string) []string {
	var inUse []string
	for _, l := range logs {
		unused := strings.HasSuffix(l, tmpSuffix) ||
			!strings.HasSuffix(l, gzSuffix) && slices.Contains(logs, l+gzSuffix)
		if !unused {
			inUse = append(inUse, l)
			continue
		}
		if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			klog.ErrorS(err, "Removing an unused log file", "path", l)
			inUse = append(inUse, l)
		}
	}
	return inUse
}

// compressLog gzips a rotated log into <log>.gz (through a temporary file,
// so that a crash never leaves a truncated .gz) and removes the original.
func compressLog(path string) (err error) {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := path + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = out.Close()
			_ = os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress log %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress log %s: %w", path, err)
	}
	if err := os.Rename(tmp, path+gzSuffix); err != nil {
		return err
	}
	return os.Remove(path)
}

// removeContainerLogs removes a container's log and its rotated files, as
// kubelet does when it removes the container.
func (p *Provider) removeContainerLogs(podLogDir, logPath string) {
	path := joinLogPath(podLogDir, logPath)
	if path == "" {
		return
	}
	if p.logs != nil {
		p.logs.mu.Lock()
		defer p.logs.mu.Unlock()
	}
	rotated, err := rotatedLogs(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		klog.ErrorS(err, "Listing a removed container's logs", "path", path)
	}
	for _, f := range append(rotated, path) {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			klog.ErrorS(err, "Removing a removed container's log", "path", f)
		}
	}
}

// joinLogPath is a container's log path as the runtime reported it, made
// absolute against its pod's log directory when the runtime gave it
// relative to it.
func joinLogPath(podLogDir, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(podLogDir, path)
}
