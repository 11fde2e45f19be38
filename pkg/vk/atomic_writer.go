package vk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The layout of a configMap, secret, downwardAPI or projected volume is
// kubelet's AtomicWriter's (pkg/volume/util/atomic_writer.go), so that a
// running container that has the volume's folder mounted sees an update
// all at once:
//
//	<dir>/..2026_11_30_14_50_01.123456   the files of one version
//	<dir>/..data -> ..2026_11_30_14_50_01.123456
//	<dir>/<name> -> ..data/<name>        one per top-level name
//
// An update writes a new timestamped folder, then renames a fresh symlink
// over ..data (one atomic step), then fixes the top-level links and drops
// the old folder. A subPath mount binds one resolved file, so it keeps the
// old content, as with kubelet. The writer is kept here rather than
// imported: it lives in k8s.io/kubernetes, which is not importable as a
// library.

const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
)

// checkPayloadPath refuses what could leave the volume or clash with the
// writer's own names, as kubelet's validatePath does.
func checkPayloadPath(p string) error {
	if p == "" || !filepath.IsLocal(p) || len(p) > 4096 {
		return fmt.Errorf("file path %q must be relative and stay inside the volume", p)
	}
	for _, part := range strings.Split(filepath.ToSlash(p), "/") {
		if part == ".." {
			return fmt.Errorf("file path %q must not contain '..'", p)
		}
	}
	if strings.HasPrefix(p, "..") {
		return fmt.Errorf("file path %q must not start with '..'", p)
	}
	return nil
}

// writeAtomic makes dir hold exactly files (relative path → content) in
// the layout above. Nothing is written when the content, modes and owners
// are unchanged, so calling it every pod sync is cheap. With fsGroup, the
// folders get that group and r-x for it, setgid, as kubelet's
// SetVolumeOwnership makes them (volumes_ownership.go; files carry their
// own).
func writeAtomic(dir string, files map[string]file, fsGroup *int64) error {
	for p := range files {
		if err := checkPayloadPath(p); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := ownDir(dir, 0, fsGroup); err != nil {
		return err
	}
	dataLink := filepath.Join(dir, dataDirName)
	old, _ := os.Readlink(dataLink)
	if old != "" && sameContent(dataLink, files) {
		return nil
	}
	ts, err := os.MkdirTemp(dir, ".."+time.Now().UTC().Format("2006_01_02_15_04_05.")) // like kubelet's
	if err != nil {
		return err
	}
	if err := writePayload(ts, files, fsGroup); err != nil {
		_ = os.RemoveAll(ts)
		return err
	}
	tmpLink := filepath.Join(dir, newDataDirName)
	_ = os.Remove(tmpLink)
	if err := os.Symlink(filepath.Base(ts), tmpLink); err != nil {
		_ = os.RemoveAll(ts)
		return err
	}
	if err := lchownGroup(tmpLink, fsGroup); err != nil {
		_ = os.RemoveAll(ts)
		return err
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		_ = os.RemoveAll(ts)
		return err
	}
	// Top-level names: add the new, drop the gone.
	top := map[string]bool{}
	for p := range files {
		top[strings.SplitN(filepath.ToSlash(p), "/", 2)[0]] = true
	}
	for name := range top {
		link := filepath.Join(dir, name)
		want := filepath.Join(dataDirName, name)
		target, err := os.Readlink(link)
		if err == nil && target == want {
			continue
		}
		if err == nil || !errors.Is(err, os.ErrNotExist) {
			// A wrong link, or a plain file or folder from another
			// layout: replace it.
			if err := os.RemoveAll(link); err != nil {
				return err
			}
		}
		if err := os.Symlink(want, link); err != nil {
			return err
		}
		if err := lchownGroup(link, fsGroup); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	current := filepath.Base(ts)
	for _, e := range entries {
		n := e.Name()
		switch {
		case !strings.HasPrefix(n, ".."):
			if !top[n] {
				_ = os.RemoveAll(filepath.Join(dir, n))
			}
		case n == dataDirName || n == current:
		case e.IsDir():
			// The previous version, and any left by a write that died
			// half-way.
			_ = os.RemoveAll(filepath.Join(dir, n))
		}
	}
	return nil
}

// writePayload writes files under a new folder, with their modes and
// owners exactly (whatever the umask).
func writePayload(dir string, files map[string]file, fsGroup *int64) error {
	if err := ownDir(dir, 0o755, fsGroup); err != nil {
		return err
	}
	for p, f := range files {
		full := filepath.Join(dir, p)
		for sub := filepath.Dir(p); sub != "."; sub = filepath.Dir(sub) {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				return err
			}
			if err := ownDir(filepath.Join(dir, sub), 0o755, fsGroup); err != nil {
				return err
			}
		}
		if err := os.WriteFile(full, f.data, f.mode); err != nil {
			return err
		}
		// The owner first: a chown may clear mode bits.
		if f.uid != nil || f.gid != nil {
			if err := os.Lchown(full, idOr(f.uid), idOr(f.gid)); err != nil {
				return err
			}
		}
		if err := os.Chmod(full, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func idOr(id *int64) int {
	if id == nil {
		return -1
	}
	return int(*id)
}

// ownDir gives folder p mode perm (0: keep its own) and, with fsGroup,
// that group with r-x and setgid for it. It changes nothing already so.
func ownDir(p string, perm os.FileMode, fsGroup *int64) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	mode := fi.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky)
	if perm != 0 {
		mode = perm
	}
	if fsGroup != nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int64(st.Gid) != *fsGroup {
			if err := os.Lchown(p, -1, int(*fsGroup)); err != nil {
				return err
			}
		}
		mode |= fsGroupDirBits
	}
	if mode != fi.Mode()&(os.ModePerm|os.ModeSetgid|os.ModeSticky) {
		return os.Chmod(p, mode)
	}
	return nil
}

func lchownGroup(p string, fsGroup *int64) error {
	if fsGroup == nil {
		return nil
	}
	return os.Lchown(p, -1, int(*fsGroup))
}

// sameContent reports whether the folder data holds exactly files, with
// their modes and owners.
func sameContent(data string, files map[string]file) bool {
	n := 0
	err := filepath.WalkDir(data+"/", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(data, p)
		f, ok := files[rel]
		if !ok {
			return errors.New("extra")
		}
		fi, err := d.Info()
		if err != nil || fi.Mode().Perm() != f.mode.Perm() {
			return errors.New("mode")
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok ||
			(f.uid != nil && int64(st.Uid) != *f.uid) || (f.gid != nil && int64(st.Gid) != *f.gid) {
			return errors.New("owner")
		}
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, f.data) {
			return errors.New("content")
		}
		n++
		return nil
	})
	return err == nil && n == len(files)
}
