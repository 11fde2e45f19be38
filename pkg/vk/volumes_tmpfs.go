package vk

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// emptyDir with medium Memory is a tmpfs mounted on the volume's folder,
// as kubelet makes it; the runtime bind-mounts the folder, so the
// container sees the tmpfs. Mounting needs CAP_SYS_ADMIN on this host:
// without it the volume is a disk folder (the pod still runs), said once
// in the log.

var tmpfsRefused sync.Once

// setUpMemoryDir mounts a tmpfs of the pod's size on p unless one is
// there already (a second pass, or vk-cri restarted).
func setUpMemoryDir(p string, pod *v1.Pod, v *v1.EmptyDirVolumeSource, alloc v1.ResourceList) error {
	if err := os.MkdirAll(p, 0o777); err != nil {
		return err
	}
	if mounted, err := isMountPoint(p); err != nil || mounted {
		return err
	}
	// No mode: as kubelet's, the tmpfs has its default, 1777.
	opts := ""
	if size := memoryDirSize(pod, v.SizeLimit, alloc); size > 0 {
		opts = fmt.Sprintf("size=%d", size)
	}
	err := unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		tmpfsRefused.Do(func() {
			klog.InfoS("Cannot mount tmpfs here; emptyDir volumes of medium Memory are disk folders", "err", err)
		})
		return os.Chmod(p, os.ModeSticky|0o777) // a tmpfs's mode
	}
	if err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", p, err)
	}
	return nil
}

// memoryDirSize is kubelet's size for a memory-backed emptyDir: the pod's
// memory limit (the node's allocatable memory when a container has none),
// capped by the volume's sizeLimit.
func memoryDirSize(pod *v1.Pod, sizeLimit *resource.Quantity, alloc v1.ResourceList) int64 {
	size := alloc.Memory().Value()
	var sum, initMax int64
	limited := true
	for _, c := range pod.Spec.Containers {
		q, ok := c.Resources.Limits[v1.ResourceMemory]
		limited = limited && ok
		sum += q.Value()
	}
	for _, c := range pod.Spec.InitContainers {
		if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
			initMax = max(initMax, q.Value())
		}
	}
	if limited && len(pod.Spec.Containers) > 0 {
		size = max(sum, initMax)
	}
	if sizeLimit != nil && sizeLimit.Value() > 0 && (size == 0 || sizeLimit.Value() < size) {
		size = sizeLimit.Value()
	}
	return size
}

// isMountPoint tells whether p is the root of a mount, from
// /proc/self/mountinfo (a bind mount of the same file system too, which a
// comparison of devices would miss).
func isMountPoint(p string) (bool, error) {
	return mountinfo.Mounted(p)
}
