// Package staging copies the host paths of pods' mounts into named volumes
// of an engine that does not share this machine's filesystem (an ssh:// or
// remote tcp:// one), and keeps them in sync.
package staging

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Mode is --stage-mounts: when host-path mounts are copied to the engine
// rather than bound.
type Mode string

const (
	// Auto stages when the engine does not share this machine's
	// filesystem: an ssh:// or non-loopback tcp:// endpoint, or an engine
	// whose name (/info) is not this host's name.
	Auto Mode = "auto"
	// Always stages on any engine (tests do remote mode on one machine
	// with it).
	Always Mode = "always"
	// Never binds host paths as they are.
	Never Mode = "never"
)

// Labels of staged volumes and of the short-lived containers that fill
// them.
const (
	labelStageProject = "io.cri-compose.stage.project"
	labelStageSource  = "io.cri-compose.stage.source"
	labelStageHelper  = "io.cri-compose.stage.helper"
	// labelStageOwner is the state dir of the cri-compose that made the
	// volume: several may share an engine, each sweeps only its own.
	labelStageOwner = "io.cri-compose.stage.owner"
)

// stageSyncInterval is how often staged directories are compared with the
// host's: vk-cri rewrites configMap and secret files in place (atomic
// writer), and kubelet's own sync takes about a minute, so one second is
// well within what pods expect.
const stageSyncInterval = time.Second

// Decide says whether pods' host paths must be staged on an engine named
// engineName (/info) that shares this machine's filesystem or not
// (dockerapi.Client.SharesFilesystem); it logs the answer with the reason,
// once per engine start. "" is Auto.
func Decide(mode Mode, sharesFilesystem bool, engineName string) bool {
	var stage bool
	var why string
	host, _ := os.Hostname()
	switch {
	case mode == Always:
		stage, why = true, "--stage-mounts=always"
	case mode == Never:
		stage, why = false, "--stage-mounts=never"
	case !sharesFilesystem:
		stage, why = true, "the endpoint is not on this machine"
	case engineName != "" && host != "" && !strings.EqualFold(engineName, host):
		// A local socket forwarded from elsewhere, or an engine in a VM.
		stage, why = true, fmt.Sprintf("the engine's host is %q, this is %q", engineName, host)
	default:
		why = "the engine shares this machine's filesystem"
	}
	klog.InfoS("Host-path mounts", "staged", stage, "why", why)
	return stage
}

// Stager copies the host paths of pods' mounts into named volumes on the
// engine, through its archive API into a short-lived container that
// mounts the volume, and copies them again when they change.
type Stager struct {
	docker Engine
	infra  func() string // an image the engine has: the infra image
	owner  string        // the state dir, absolute (labelStageOwner)

	mu   sync.Mutex
	vols map[string]*stagedVol // by volume name
}

type stagedVol struct {
	mu      sync.Mutex // one copy at a time
	project string
	src     string
	sig     string // signature of src at the last copy ("" = never copied)
}

// New makes the stager of engine d for the server of stateDir; infra
// names an image the engine has.
func New(d Engine, stateDir string, infra func() string) *Stager {
	owner, err := filepath.Abs(stateDir)
	if err != nil {
		owner = stateDir
	}
	return &Stager{docker: d, infra: infra, owner: owner, vols: map[string]*stagedVol{}}
}

// FileCopy is a file mount, copied into the container before it starts
// (CopyFiles).
type FileCopy struct{ src, dst string }

// Stage prepares cfg's host-path mounts in project: it returns
// sandbox.ContainerInput.Staged, and the files to copy into the container
// once created (CopyFiles).
func (st *Stager) Stage(ctx context.Context, project string, cfg *runtime.ContainerConfig) (map[int]string, []FileCopy, error) {
	out := map[int]string{}
	var files []FileCopy
	for i, m := range cfg.GetMounts() {
		src := m.GetHostPath()
		if m.GetImage() != nil || src == "" {
			continue
		}
		fi, err := os.Stat(src)
		switch {
		case err == nil && !fi.IsDir():
			out[i] = sandbox.StagedCopy
			if dst := m.GetContainerPath(); engineManaged(dst) {
				// Mounted by the runtime at start, over anything copied
				// before: /dev is a tmpfs (kubelet's termination-log
				// file is left out: the message falls back to the log),
				// /etc/hosts, hostname and resolv.conf are the engine's.
				klog.V(2).InfoS("Not staging a file the engine mounts over", "project", project, "path", dst)
			} else {
				files = append(files, FileCopy{src: src, dst: dst})
			}
			continue
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("stage mount %q: %w", m.GetContainerPath(), err)
		}
		// A directory, or a missing path (a bind would create it empty).
		name := sandbox.StagedVolumeName(project, src)
		if err := st.ensure(ctx, project, src, name); err != nil {
			return nil, nil, fmt.Errorf("stage mount %q: %w", m.GetContainerPath(), err)
		}
		out[i] = name
	}
	return out, files, nil
}

func engineManaged(p string) bool {
	p = path.Clean(p)
	switch p {
	case "/etc/hosts", "/etc/hostname", "/etc/resolv.conf":
		return true
	}
	for _, d := range []string{"/dev", "/proc", "/sys"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// ensure makes volume name and fills it from src, once; the sync loop
// keeps it current.
func (st *Stager) ensure(ctx context.Context, project, src, name string) error {
	st.mu.Lock()
	v := st.vols[name]
	if v == nil {
		v = &stagedVol{project: project, src: src}
		st.vols[name] = v
	}
	st.mu.Unlock()
	if err := st.docker.VolumeCreate(ctx, name, map[string]string{labelStageProject: project, labelStageSource: src, labelStageOwner: st.owner}); err != nil {
		return err
	}
	return st.sync(ctx, name, v)
}

// sync copies src into the volume if it changed since the last copy.
// Files removed from src stay in the volume: the archive API only adds.
// vk-cri's atomic writer swaps a "..data" symlink to a new folder, so
// what a pod reads through the keys' links is always the new content.
func (st *Stager) sync(ctx context.Context, name string, v *stagedVol) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	sig, err := treeSignature(v.src)
	if err != nil {
		return err
	}
	if sig == v.sig {
		return nil
	}
	if err := st.copyIntoVolume(ctx, name, v.src); err != nil {
		return err
	}
	v.sig = sig
	klog.V(2).InfoS("Staged a host path in a volume", "project", v.project, "source", v.src, "volume", name)
	return nil
}

// copyIntoVolume puts src's tree into volume name through a container
// that mounts it (created, never started, then removed).
func (st *Stager) copyIntoVolume(ctx context.Context, name, src string) error {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	helper := name + "-sync-" + hex.EncodeToString(b)
	id, err := st.docker.ContainerCreate(ctx, helper,
		&container.Config{Image: st.infra(), Labels: map[string]string{labelStageHelper: name}},
		&container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: name, Target: "/stage"}}}, nil)
	if err != nil {
		return err
	}
	defer func() {
		// Removed even when ctx ended: a helper must not outlive the copy.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := st.docker.ContainerRemove(rctx, id); err != nil && !dockerapi.IsNotFound(err) {
			klog.ErrorS(err, "Cannot remove a staging container", "container", helper)
		}
	}()
	return st.copyTree(ctx, id, "/stage", src, "")
}

// CopyFiles copies file mounts into a created container.
func (st *Stager) CopyFiles(ctx context.Context, id string, files []FileCopy) error {
	for _, f := range files {
		// Extracted at / with the parent folders in the archive, so the
		// destination's folder need not exist in the image.
		if err := st.copyTree(ctx, id, "/", f.src, strings.TrimPrefix(path.Clean(f.dst), "/")); err != nil {
			return fmt.Errorf("copy %s to %s: %w", f.src, f.dst, err)
		}
	}
	return nil
}

// copyTree streams src (a directory, or a file stored as as) as a tar
// archive to dir in container id.
func (st *Stager) copyTree(ctx context.Context, id, dir, src, as string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src, as)) }()
	err := st.docker.CopyToContainer(ctx, id, dir, pr)
	pr.CloseWithError(err) // ends writeTar if the copy failed first
	return err
}

// writeTar writes src as a tar archive: a directory's content at the
// archive's root, or a file under the name as (with its parent folders).
// Symbolic links stay links (vk-cri's "..data" layout relies on them).
func writeTar(w io.Writer, src, as string) error {
	tw := tar.NewWriter(w)
	add := func(p, name string, fi fs.FileInfo) error {
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = name
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	}
	if as != "" {
		fi, err := os.Stat(src)
		if err != nil {
			return err
		}
		dirs := strings.Split(path.Dir(as), "/")
		for i := range dirs {
			if dirs[0] == "." {
				break
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.Join(dirs[:i+1], "/") + "/", Mode: 0o755, ModTime: fi.ModTime()}); err != nil {
				return err
			}
		}
		if err := add(src, as, fi); err != nil {
			return err
		}
		return tw.Close()
	}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == src {
				return fs.SkipAll // a missing source stages as an empty volume
			}
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return add(p, filepath.ToSlash(rel), fi)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// treeSignature sums the names, types, sizes, modes, times and link
// targets below src: it changes when any file is written or replaced.
func treeSignature(src string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == src {
				return fs.SkipAll
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		fmt.Fprintf(h, "%s\x00%v\x00%d\x00%d\x00%s\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), link)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Adopt learns the staged volumes an earlier run made (after a restart
// of cri-compose), so that they are kept in sync again.
func (st *Stager) Adopt(ctx context.Context) {
	vols, err := st.docker.VolumeList(ctx, labelStageOwner+"="+st.owner)
	if err != nil {
		klog.ErrorS(err, "Cannot list staged volumes")
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for name, l := range vols {
		if st.vols[name] == nil {
			// Copied again on the first tick: the signature is unknown.
			st.vols[name] = &stagedVol{project: l[labelStageProject], src: l[labelStageSource]}
		}
	}
}

// Run keeps staged volumes in sync until ctx ends.
func (st *Stager) Run(ctx context.Context) {
	t := time.NewTicker(stageSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st.mu.Lock()
		vols := make(map[string]*stagedVol, len(st.vols))
		for n, v := range st.vols {
			if v.src != "" {
				vols[n] = v
			}
		}
		st.mu.Unlock()
		for name, v := range vols {
			if err := st.sync(ctx, name, v); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Cannot sync a staged volume (tried again in a second)", "volume", name, "source", v.src, "err", err)
			}
		}
	}
}

// Sweep removes this server's staged volumes of pods that are gone (a
// RemovePodSandbox that did not finish, pods removed while cri-compose
// was down); live are the projects of the store's pods.
func (st *Stager) Sweep(ctx context.Context, live map[string]bool) {
	vols, err := st.docker.VolumeList(ctx, labelStageOwner+"="+st.owner)
	if err != nil {
		klog.ErrorS(err, "Cannot list staged volumes")
		return
	}
	gone := map[string]bool{}
	for _, l := range vols {
		if p := l[labelStageProject]; p != "" && !live[p] {
			gone[p] = true
		}
	}
	for p := range gone {
		if err := st.RemovePod(ctx, p); err != nil {
			klog.ErrorS(err, "Cannot remove the staged volumes of a removed pod", "project", p)
		} else {
			klog.V(1).InfoS("Removed the staged volumes of a removed pod", "project", p)
		}
	}
}

// RemovePod removes the staged volumes of project (its containers are
// gone) and forgets them.
func (st *Stager) RemovePod(ctx context.Context, project string) error {
	vols, err := st.docker.VolumeList(ctx, labelStageProject+"="+project, labelStageOwner+"="+st.owner)
	if err != nil {
		return err
	}
	for name := range vols {
		if err := st.docker.VolumeRemove(ctx, name); err != nil && !dockerapi.IsNotFound(err) {
			return fmt.Errorf("staged volume %s: %w", name, err)
		}
	}
	st.mu.Lock()
	for n, v := range st.vols {
		if v.project == project {
			delete(st.vols, n)
		}
	}
	st.mu.Unlock()
	return nil
}
