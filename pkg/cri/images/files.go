package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Files of images, which Engine API 1.41 only shows through a container:
// a reader container is created from the image (never started: its
// command does not even exist), the archive or export API reads it, and
// it is removed. Two things need them:
//
//   - who a container runs as: the image's /etc/passwd and /etc/group
//     (ResolveUser), read once per image;
//   - image volumes (Mount.image, kubelet's ImageVolume): the engine
//     cannot mount an image before API 1.48, so the image's filesystem is
//     exported once per image into <state>/image-volumes/<id>/rootfs and
//     bind-mounted read-only (a sub path of it with image_sub_path). This
//     needs the engine on this host, as every bind mount does.
//
// A copy stays while a container of the store mounts it, and goes when
// its image is removed through RemoveImage or, found gone, at a resync.
type Files struct {
	docker   FileEngine
	stateDir string
	started  time.Time
	// inUse says whether a container of the store mounts image id.
	inUse func(id string) bool

	mu    sync.Mutex
	users map[string]sandbox.ImageUsers // by image id; images are immutable
	locks map[string]*sync.Mutex        // one export at a time per image
}

// labelReader marks reader containers; its value is the state dir of the
// server that made it.
const labelReader = "io.cri-compose.image-reader"

// readerEntrypoint is what a reader container would run: nothing does.
const readerEntrypoint = "/.cri-compose-image-reader-never-started"

// maxUserFile bounds what is read of /etc/passwd or /etc/group.
const maxUserFile = 4 << 20

// NewFiles reads the files of engine d's images, keeping its copies under
// stateDir. started is when the server started: reader containers and
// unfinished copies older than that are a crash's, which Sweep removes.
// inUse says whether a container still mounts an image's copy.
func NewFiles(d FileEngine, stateDir string, started time.Time, inUse func(imageID string) bool) *Files {
	return &Files{docker: d, stateDir: stateDir, started: started, inUse: inUse,
		users: map[string]sandbox.ImageUsers{}, locks: map[string]*sync.Mutex{}}
}

// withReader runs fn with a reader container of image id.
func (f *Files) withReader(ctx context.Context, imageID string, fn func(ctr string) error) error {
	cfg := &container.Config{
		Image:           imageID,
		Entrypoint:      []string{readerEntrypoint},
		Labels:          map[string]string{labelReader: f.stateDir},
		NetworkDisabled: true,
	}
	hc := &container.HostConfig{NetworkMode: "none", LogConfig: container.LogConfig{Type: "none"}}
	id, err := f.docker.ContainerCreate(ctx, "", cfg, hc, nil)
	if err != nil {
		return fmt.Errorf("read the files of image %s: %w", imageID, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.docker.ContainerRemove(rctx, id); err != nil && !dockerapi.IsNotFound(err) {
			klog.ErrorS(err, "Cannot remove an image reader container", "id", id, "image", imageID)
		}
	}()
	return fn(id)
}

// UsersOf reads image id's /etc/passwd and /etc/group, once per image.
func (f *Files) UsersOf(ctx context.Context, imageID string) (sandbox.ImageUsers, error) {
	f.mu.Lock()
	u, ok := f.users[imageID]
	f.mu.Unlock()
	if ok {
		return u, nil
	}
	err := f.withReader(ctx, imageID, func(ctr string) error {
		var err error
		if u.Passwd, err = f.readFile(ctx, ctr, "/etc/passwd"); err != nil {
			return err
		}
		u.Group, err = f.readFile(ctx, ctr, "/etc/group")
		return err
	})
	if err != nil {
		return sandbox.ImageUsers{}, err
	}
	f.mu.Lock()
	f.users[imageID] = u
	f.mu.Unlock()
	return u, nil
}

// readFile reads one file of a container through the archive API,
// following a symbolic link once; nil when it does not exist.
func (f *Files) readFile(ctx context.Context, ctr, p string) ([]byte, error) {
	for range 2 {
		rc, err := f.docker.CopyFromContainer(ctx, ctr, p)
		if dockerapi.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(rc)
		h, err := tr.Next()
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			b, err := io.ReadAll(io.LimitReader(tr, maxUserFile))
			rc.Close()
			return b, err
		case tar.TypeSymlink:
			rc.Close()
			if path.IsAbs(h.Linkname) {
				p = path.Clean(h.Linkname)
			} else {
				p = path.Join(path.Dir(p), h.Linkname)
			}
			continue
		}
		rc.Close()
		return nil, nil // a directory, a device: no file to read
	}
	return nil, nil
}

// forgetUsers drops what was read of image id (it was removed).
func (f *Files) forgetUsers(imageID string) {
	f.mu.Lock()
	delete(f.users, imageID)
	f.mu.Unlock()
}

// VolumesDir holds the image volumes' copies.
func (f *Files) VolumesDir() string { return filepath.Join(f.stateDir, "image-volumes") }

// copyDir is where image id's copy lives: rootfs beside a "complete"
// marker.
func (f *Files) copyDir(imageID string) string {
	return filepath.Join(f.VolumesDir(), strings.TrimPrefix(imageID, "sha256:"))
}

func (f *Files) lockImage(imageID string) func() {
	f.mu.Lock()
	m := f.locks[imageID]
	if m == nil {
		m = &sync.Mutex{}
		f.locks[imageID] = m
	}
	f.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// rootfs is the directory holding a read-only copy of image id's
// filesystem, made on first use.
func (f *Files) rootfs(ctx context.Context, imageID string) (string, error) {
	if !f.docker.IsLocal() {
		return "", fmt.Errorf("%w: image volumes need the engine on this host (a copy of the image is bind-mounted)", sandbox.ErrUnsupported)
	}
	unlock := f.lockImage(imageID)
	defer unlock()
	dir := f.copyDir(imageID)
	rootfs := filepath.Join(dir, "rootfs")
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return rootfs, nil
	}
	if err := os.MkdirAll(f.VolumesDir(), 0o700); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(f.VolumesDir(), filepath.Base(dir)+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // left only when the rename failed
	// The top directory stays 0700: only root reaches the copy on the host;
	// the container sees the image's own modes.
	start := time.Now()
	err = f.withReader(ctx, imageID, func(ctr string) error {
		rc, err := f.docker.ContainerExport(ctx, ctr)
		if err != nil {
			return err
		}
		defer rc.Close()
		return extractTar(rc, filepath.Join(tmp, "rootfs"))
	})
	if err != nil {
		return "", fmt.Errorf("copy image %s for an image volume: %w", imageID, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o600); err != nil {
		return "", err
	}
	_ = os.RemoveAll(dir) // an unfinished copy of a crash
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	klog.V(1).InfoS("Copied an image for image volumes", "image", imageID, "dir", rootfs, "took", time.Since(start))
	return rootfs, nil
}

// MountSource is the host path that serves an image volume mount: the
// copy's root, or its sub_path resolved inside it (symbolic links never
// leave the copy). A sub path the image lacks is an error.
func (f *Files) MountSource(ctx context.Context, imageID, subPath string) (string, error) {
	rootfs, err := f.rootfs(ctx, imageID)
	if err != nil {
		return "", err
	}
	if subPath == "" {
		return rootfs, nil
	}
	if path.IsAbs(subPath) || slices.Contains(strings.Split(subPath, "/"), "..") {
		return "", fmt.Errorf("%w: image_sub_path %q must be relative and stay in the image", sandbox.ErrInvalid, subPath)
	}
	p, err := resolveIn(rootfs, subPath)
	if err != nil {
		return "", fmt.Errorf("%w: image_sub_path %q of image %s: %v", sandbox.ErrInvalid, subPath, imageID, err)
	}
	return p, nil
}

// resolveIn resolves rel inside root as if root were "/" (as the image
// sees it): symbolic links, absolute or relative, are followed but never
// leave root. The result has no symbolic link below root and exists.
func resolveIn(root, rel string) (string, error) {
	var done []string
	todo := strings.Split(rel, "/")
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		p := filepath.Join(root, filepath.Join(done...), c)
		fi, err := os.Lstat(p)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, c)
			continue
		}
		if links++; links > 40 {
			return "", &fs.PathError{Op: "resolve", Path: rel, Err: syscall.ELOOP}
		}
		t, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if path.IsAbs(t) {
			done = nil
		}
		todo = append(strings.Split(t, "/"), todo...)
	}
	return filepath.Join(append([]string{root}, done...)...), nil
}

// extractTar unpacks an export into dest with owners, modes and times.
// Every path is created through an os.Root, so no entry (a "..", a
// symbolic link met on the way) can write outside dest. Device nodes and
// FIFOs are left out: an image volume is data, and only root could make
// them.
func extractTar(r io.Reader, dest string) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirTimes struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTimes
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if name == "." || name == ".." || strings.HasPrefix(name, "../") {
			continue
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, dirTimes{name, h.ModTime})
		case tar.TypeReg:
			_ = root.Remove(name)
			out, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
			if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
				return err
			}
			continue
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(h.Linkname, "/"))
			_ = root.Remove(name)
			if err := root.Link(target, name); err != nil {
				return err
			}
			continue // the target's owner, mode and times
		default:
			continue // devices, FIFOs
		}
		// Owner first: changing it clears set-uid and set-gid bits.
		if err := root.Lchown(name, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := root.Chmod(name, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			_ = root.Chtimes(name, h.ModTime, h.ModTime)
		}
	}
	for _, d := range slices.Backward(dirs) { // children first: they touch their parent
		_ = root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return nil
}

// ForgetImage removes image id's copy, unless a container still mounts it.
func (f *Files) ForgetImage(imageID string) {
	f.forgetUsers(imageID)
	if f.inUse != nil && f.inUse(imageID) {
		return
	}
	unlock := f.lockImage(imageID)
	defer unlock()
	if err := os.RemoveAll(f.copyDir(imageID)); err != nil {
		klog.ErrorS(err, "Cannot remove the copy of a removed image", "image", imageID)
	}
}

// Sweep removes what a crash or an image removed outside the CRI left:
// reader containers made before this server started, unfinished copies,
// and copies of images that are gone and that no container mounts.
func (f *Files) Sweep(ctx context.Context) {
	if list, err := f.docker.ContainerList(ctx, labelReader+"="+f.stateDir); err == nil {
		for _, c := range list {
			if time.Unix(c.Created, 0).Before(f.started.Add(-time.Second)) {
				_ = f.docker.ContainerRemove(ctx, c.ID)
			}
		}
	}
	entries, err := os.ReadDir(f.VolumesDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if strings.Contains(name, ".tmp-") {
			if info, err := e.Info(); err == nil && info.ModTime().Before(f.started) {
				_ = os.RemoveAll(filepath.Join(f.VolumesDir(), name))
			}
			continue
		}
		id := "sha256:" + name
		if f.inUse != nil && f.inUse(id) {
			continue
		}
		if _, err := f.docker.ImageInspect(ctx, id); dockerapi.IsNotFound(err) {
			f.ForgetImage(id)
		}
	}
}
