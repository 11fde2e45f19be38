package stats

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Writable layers are measured in the background, never in a request:
//
//   - when the engine is local and its storage driver names the container's
//     upper directory (overlay2, fuse-overlayfs), this process walks that
//     directory itself (bytes on disk and inodes): once when the container
//     appears, then every layerMaxAge;
//   - otherwise one engine list with sizes (SizeRw of every container in one
//     call, which makes the engine walk them all) at most every layerMaxAge,
//     or every layerNewAge while some container was never measured.
const (
	layerMaxAge = 30 * time.Second
	layerNewAge = 10 * time.Second
	layerTick   = time.Second
	// layerNowTimeout bounds the engine's walk of one new layer in a
	// request.
	layerNowTimeout = 3 * time.Second
)

type layerUsage struct {
	at        int64
	bytes     uint64
	inodes    uint64
	hasInodes bool
}

type layerCache struct {
	docker Engine
	src    Source

	maxAge     atomic.Int64 // ns; layerMaxAge but in tests
	engineOnly atomic.Bool  // tests: measure through the engine only

	mu    sync.RWMutex
	sizes map[string]layerUsage
	mount string // the storage driver's directory: the filesystem id
	// walkable: the storage driver keeps each writable layer in a
	// directory of its own (GraphDriver UpperDir), set with mount.
	walkable bool

	// used by run only
	upper    map[string]string // "" : not walkable here
	lastList time.Time
}

func newLayerCache(d Engine, src Source) *layerCache {
	l := &layerCache{docker: d, src: src, sizes: map[string]layerUsage{}, upper: map[string]string{}}
	l.maxAge.Store(int64(layerMaxAge))
	return l
}

// usage is the last measure of a container's writable layer (nil before
// the first).
func (l *layerCache) usage(id string) *runtime.FilesystemUsage {
	l.mu.RLock()
	u, ok := l.sizes[id]
	mount := l.mount
	l.mu.RUnlock()
	if !ok {
		return nil
	}
	fu := &runtime.FilesystemUsage{Timestamp: u.at, FsId: &runtime.FilesystemIdentifier{Mountpoint: mount},
		UsedBytes: &runtime.UInt64Value{Value: u.bytes}}
	if u.hasInodes {
		fu.InodesUsed = &runtime.UInt64Value{Value: u.inodes}
	}
	return fu
}

// usageNow is usage, measuring on the spot a layer never measured yet (a
// container created since the last refresh): walked here when this process
// can, else by the engine for this one container (bounded by
// layerNowTimeout; a just-created layer is small). The engine's list of
// all sizes is never asked from here.
func (l *layerCache) usageNow(ctx context.Context, id string) *runtime.FilesystemUsage {
	if u := l.usage(id); u != nil || l.mountpoint(ctx) == "" {
		return u
	}
	dir := l.upperDir(ctx, id)
	if dir == "" {
		ctx, cancel := context.WithTimeout(ctx, layerNowTimeout)
		defer cancel()
		at := time.Now().UnixNano()
		n, err := l.docker.ContainerSize(ctx, id)
		if err != nil {
			klog.V(4).InfoS("Cannot measure a writable layer through the engine", "id", id, "err", err)
			return nil
		}
		l.mu.Lock()
		if _, ok := l.sizes[id]; !ok {
			l.sizes[id] = layerUsage{at: at, bytes: uint64(max(n, 0))}
		}
		l.mu.Unlock()
		return l.usage(id)
	}
	at := time.Now().UnixNano()
	bytes, inodes, err := diskUsage(dir)
	if err != nil {
		return nil
	}
	l.mu.Lock()
	if _, ok := l.sizes[id]; !ok {
		l.sizes[id] = layerUsage{at: at, bytes: bytes, inodes: inodes, hasInodes: true}
	}
	l.mu.Unlock()
	return l.usage(id)
}

// fsCapacity is the size and the inodes of the filesystem that holds the
// writable layers (statfs of the storage driver's directory), when this
// process sees it.
type fsCapacity struct {
	mount                     string
	bytes, inodes, inodesFree uint64
}

func (l *layerCache) capacity(ctx context.Context) (fsCapacity, bool) {
	m := l.mountpoint(ctx)
	if m == "" || !l.docker.IsLocal() {
		return fsCapacity{}, false
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m, &st); err != nil {
		return fsCapacity{}, false
	}
	return fsCapacity{mount: m, bytes: st.Blocks * uint64(st.Bsize), inodes: st.Files, inodesFree: st.Ffree}, true
}

func (l *layerCache) run(ctx context.Context) {
	t := time.NewTicker(layerTick)
	defer t.Stop()
	for {
		l.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh measures what is due.
func (l *layerCache) refresh(ctx context.Context) {
	if l.mountpoint(ctx) == "" {
		return // engine not answering yet
	}
	ctrs := l.src.ContainerIDs()
	live := make(map[string]bool, len(ctrs))
	l.mu.RLock()
	known := make(map[string]layerUsage, len(l.sizes))
	for id, u := range l.sizes {
		known[id] = u
	}
	l.mu.RUnlock()
	now := time.Now()
	maxAge := time.Duration(l.maxAge.Load())
	needList, unmeasured := false, false
	for _, id := range ctrs {
		live[id] = true
		u, measured := known[id]
		if measured && now.Sub(time.Unix(0, u.at)) < maxAge {
			continue
		}
		dir, ok := l.upper[id]
		if !ok {
			dir = l.upperDir(ctx, id)
			l.upper[id] = dir
		}
		if dir == "" {
			needList = true
			unmeasured = unmeasured || !measured
			continue
		}
		at := time.Now().UnixNano()
		bytes, inodes, err := diskUsage(dir)
		if err != nil {
			if !os.IsNotExist(err) {
				klog.V(2).InfoS("Cannot measure a writable layer", "id", id, "dir", dir, "err", err)
			}
			continue
		}
		l.mu.Lock()
		l.sizes[id] = layerUsage{at: at, bytes: bytes, inodes: inodes, hasInodes: true}
		l.mu.Unlock()
	}
	age := maxAge
	if unmeasured {
		age = min(layerNewAge, maxAge)
	}
	if needList && now.Sub(l.lastList) >= age {
		l.lastList = now
		l.list(ctx, live)
	}
	for id := range l.upper {
		if !live[id] {
			delete(l.upper, id)
		}
	}
	l.mu.Lock()
	for id := range l.sizes {
		if !live[id] {
			delete(l.sizes, id)
		}
	}
	l.mu.Unlock()
}

// list asks the engine for every container's SizeRw in one call, and
// keeps those of the containers in live.
func (l *layerCache) list(ctx context.Context, live map[string]bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	at := time.Now().UnixNano()
	sizes, err := l.docker.ContainerSizes(ctx, sandbox.LabelType+"="+sandbox.TypeContainer)
	if err != nil {
		klog.V(2).InfoS("Cannot list writable layer sizes", "err", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, n := range sizes {
		if !live[id] || l.upper[id] != "" {
			continue // not the store's, or measured here with inodes
		}
		if n < 0 {
			n = 0
		}
		l.sizes[id] = layerUsage{at: at, bytes: uint64(n)}
	}
}

// mountpoint is <DockerRootDir>/<Driver>, as ImageFsInfo reports it.
func (l *layerCache) mountpoint(ctx context.Context) string {
	l.mu.RLock()
	m := l.mount
	l.mu.RUnlock()
	if m != "" {
		return m
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := l.docker.Info(ctx)
	if err != nil || info.DockerRootDir == "" {
		return ""
	}
	m = filepath.Join(info.DockerRootDir, info.Driver)
	l.mu.Lock()
	l.mount = m
	l.walkable = upperDirDriver(info.Driver, info.DriverStatus)
	l.mu.Unlock()
	return m
}

// upperDirDriver says whether a storage driver names each container's
// writable layer in GraphDriver.Data["UpperDir"]: the overlay graph
// drivers do; the containerd image store (Docker 29's default: its
// snapshotters are not graph drivers, whatever their names) and vfs,
// btrfs or zfs do not.
func upperDirDriver(driver string, status [][2]string) bool {
	for _, kv := range status {
		if kv[0] == "driver-type" && strings.Contains(kv[1], "snapshotter") {
			return false
		}
	}
	switch driver {
	case "overlay2", "overlay", "fuse-overlayfs":
		return true
	}
	return false
}

// countsInodes says whether writable layers are measured here, inodes
// with bytes, rather than by the engine, which counts bytes alone: a local
// engine on an overlay driver. False until the engine has answered.
func (l *layerCache) countsInodes(ctx context.Context) bool {
	if l.mountpoint(ctx) == "" || !l.docker.IsLocal() || l.engineOnly.Load() {
		return false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.walkable
}

// upperDir is the container's writable directory when this process can
// read it ("" otherwise).
func (l *layerCache) upperDir(ctx context.Context, id string) string {
	if !l.docker.IsLocal() || l.engineOnly.Load() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	in, err := l.docker.ContainerInspect(ctx, id)
	if err != nil || in.GraphDriver == nil {
		return ""
	}
	dir := in.GraphDriver.Data["UpperDir"]
	if dir == "" {
		return ""
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return ""
	}
	return dir
}

// diskUsage sums the blocks and counts the inodes under dir (hard links
// once).
func diskUsage(dir string) (bytes, inodes uint64, err error) {
	seen := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // vanished meanwhile
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			bytes += uint64(info.Size())
			inodes++
			return nil
		}
		if st.Nlink > 1 && !info.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		bytes += uint64(st.Blocks) * 512
		inodes++
		return nil
	})
	return bytes, inodes, err
}
