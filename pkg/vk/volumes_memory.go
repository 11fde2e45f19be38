package vk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Secret, projected and downwardAPI volumes live on a tmpfs of their own,
// as kubelet makes them (its secret, projected and downwardAPI plugins
// wrap a memory emptyDir): their files never reach the disk, and they are
// gone with the pod or a reboot. The runtime bind-mounts the volume's
// folder, so the container sees the tmpfs; vk-cri must share the mount
// namespace of the runtime's host, as it does for memory emptyDirs.
//
// The tmpfs is mounted with noswap where the kernel has it (6.4+), as
// kubelet does, so that the bytes do not reach a swap device either.
//
// Without the right to mount (no CAP_SYS_ADMIN in the host's mount
// namespace) the files are kept on disk, in a folder only root can open,
// and that is said once in the log.
//
// A restart of vk-cri finds the volumes still mounted
// (/proc/self/mountinfo) and writes into them again; running containers
// see the same tmpfs. A volume folder that already holds files and is not
// a mount point was made on disk (by an earlier vk-cri, or without the
// right to mount): it stays on disk until its pod goes, because the
// running containers have that folder bound and would not see a tmpfs
// mounted over it later.

// memoryMedium mounts the tmpfs of such volumes. A nil one keeps them on
// disk (unit tests of the file layout).
type memoryMedium struct {
	refused  atomic.Bool // mounting failed with EPERM or EACCES
	noNoswap atomic.Bool // the kernel refused the noswap option
	warnOnce sync.Once
	keptOnce sync.Once
}

// errNotEmpty: a volume's folder already holds files.
var errNotEmpty = errors.New("folder not empty")

// setUp makes p, the folder of one volume, a tmpfs unless it is one
// already. It tells whether the volume is on a tmpfs; when it is not,
// the caller keeps the files on disk in a closed folder.
func (m *memoryMedium) setUp(p string) (bool, error) {
	if err := os.MkdirAll(p, 0o755); err != nil {
		return false, err
	}
	if mounted, err := mountinfo.Mounted(p); err != nil {
		return false, fmt.Errorf("is %s a mount point: %w", p, err)
	} else if mounted {
		return true, nil // a second pass, or vk-cri restarted
	}
	if m == nil || m.refused.Load() {
		return false, nil
	}
	if err := emptyDir(p); errors.Is(err, errNotEmpty) {
		m.keptOnce.Do(func() {
			klog.InfoS("Volumes made on disk before stay on disk until their pods go (their running containers have the folder bound); new ones are on tmpfs", "first", p)
		})
		return false, nil
	} else if err != nil {
		return false, err
	}
	// tmpfs's own default mode, as kubelet's wrapped emptyDir has it; the
	// pod's folder above is what keeps other users out.
	opts := "mode=1777"
	var err error = unix.EINVAL
	if !m.noNoswap.Load() {
		if err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts+",noswap"); errors.Is(err, unix.EINVAL) {
			m.noNoswap.Store(true) // a kernel before 6.4
			klog.V(2).InfoS("tmpfs has no noswap option here; secret volumes may be swapped out", "kernel", firstLine("/proc/sys/kernel/osrelease"))
		}
	}
	if errors.Is(err, unix.EINVAL) {
		err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		m.refused.Store(true)
		m.warnOnce.Do(func() {
			klog.ErrorS(err, "Cannot mount tmpfs (vk-cri needs CAP_SYS_ADMIN in the host's mount namespace): secret, projected and downwardAPI volumes are written to the state dir's disk, in folders only root can open, instead of to memory as kubelet keeps them")
		})
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mount tmpfs on %s: %w", p, err)
	}
	return true, nil
}

// emptyDir returns errNotEmpty when folder p holds anything.
func emptyDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err == nil {
		return errNotEmpty
	} else if !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// unmountAll unmounts every mount at or below dir (the volumes' tmpfs, and
// what a container propagated there), the deepest first. Detached: a
// container still holding one does not keep the pod's folder from going.
func unmountAll(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
	if err != nil {
		return fmt.Errorf("read mounts below %s: %w", dir, err)
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].Mountpoint) > len(mounts[j].Mountpoint) })
	var errs []error
	for _, mi := range mounts {
		// EINVAL: no longer a mount point (a parent's detach took it).
		if err := unix.Unmount(mi.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mi.Mountpoint, err))
		}
	}
	return errors.Join(errs...)
}
