// Package perm says who may read what cri-compose writes on its host, and
// writes it so: the state dir (compose files, which hold every environment
// value of a pod; resolv.conf; image volume copies) and the CRI log files
// (which hold whatever the pod's programs print, secrets included).
//
// Only the owner (root) may, and the group of the CRI socket when there is
// one (--socket-group): a member of that group can already drive the
// runtime (exec into any container, read its config through
// ContainerStatus), so reading these files gives it nothing more. Anyone
// else can neither read the files nor list the folders.
package perm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Access is who besides the owner may read: nobody else (Owner) or the
// members of one group (Group).
type Access struct {
	gid   int
	group bool
}

// Owner lets the owner alone in: folders 0700, files 0600.
func Owner() Access { return Access{} }

// Group lets group gid read too: folders 0750, files 0640, group gid.
func Group(gid int) Access { return Access{gid: gid, group: true} }

// GID is the group that may read, and whether there is one.
func (a Access) GID() (int, bool) { return a.gid, a.group }

// Dir is the mode of a folder: 0700, or 0750 for the group.
func (a Access) Dir() fs.FileMode {
	if a.group {
		return 0o750
	}
	return 0o700
}

// File is the mode of a file: 0600, or 0640 for the group.
func (a Access) File() fs.FileMode {
	if a.group {
		return 0o640
	}
	return 0o600
}

// Set gives an existing path mode, and the group when there is one. A
// symbolic link is left alone (chmod would change its target).
func (a Access) Set(path string, mode fs.FileMode) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	if a.group {
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Gid) != a.gid {
			if err := os.Lchown(path, -1, a.gid); err != nil {
				return err
			}
		}
	}
	// After the chown, which may clear set-id bits.
	if fi.Mode().Perm() != mode.Perm() || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
		return os.Chmod(path, mode)
	}
	return nil
}

// MkdirAll is os.MkdirAll where every folder it makes gets Dir() and the
// group whatever the umask; folders that exist are left as they are (a
// pod log directory kubelet made is kubelet's).
func (a Access) MkdirAll(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return &fs.PathError{Op: "mkdir", Path: path, Err: syscall.ENOTDIR}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if parent := filepath.Dir(path); parent != path {
		if err := a.MkdirAll(parent); err != nil {
			return err
		}
	}
	// Made no wider than Dir() (the umask only narrows it), then set.
	if err := os.Mkdir(path, a.Dir()); err != nil {
		if fi, serr := os.Stat(path); errors.Is(err, fs.ErrExist) && serr == nil && fi.IsDir() {
			return nil // made meanwhile by another caller
		}
		return err
	}
	return a.Set(path, a.Dir())
}

// WriteFile replaces path with b atomically: a temporary file beside it,
// made with mode and the group before anything is written to it, renamed
// over path. Readers never see a partial file, and nobody outside the
// access can open it at any moment.
func (a Access) WriteFile(path string, b []byte, mode fs.FileMode) (err error) {
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // left by a crash
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if a.group {
		if err := f.Chown(-1, a.gid); err != nil {
			return fmt.Errorf("chown %s: %w", tmp, err)
		}
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
