// Package imagebuild makes Docker images in memory, without a daemon, a
// registry or a Dockerfile.
//
// Archive writes the archive that `docker save` writes and `docker load` (or
// the Engine API's POST /images/load) reads: the legacy layout with
// manifest.json (Config, RepoTags, Layers), the image config <sha256>.json,
// one uncompressed layer <sha256>/layer.tar (with the legacy VERSION and json
// files beside it) and the `repositories` file for old engines. Docker Engine
// 20.10 (API 1.41) and later load it.
//
// The output is deterministic: every entry has the same fixed modification
// time and owner unless the File says otherwise, and entries are sorted, so
// the same input always gives the same image ID.
//
// Only the standard library is used.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Epoch is the modification time of every entry of the layer and of the
// archive, and the image's creation time. Fixed so that the image ID only
// depends on the content.
var Epoch = time.Unix(0, 0).UTC()

// File is one entry of the image's single layer.
//
// The kind of entry is taken from, in order: Hardlink set (a hard link to the
// regular file at Hardlink, which must be another File of the same layer),
// Link set (a symbolic link to Link), Mode.IsDir() (a directory), otherwise a
// regular file holding Data.
//
// Parent directories that no File names are created with mode 0755, owned by
// root.
type File struct {
	// Path is the absolute (or root-relative) path in the image, such as
	// "/bin/sh". It is cleaned; "/" itself is not allowed.
	Path string
	// Mode holds the permission bits and os.ModeDir, os.ModeSetuid,
	// os.ModeSetgid and os.ModeSticky. Zero permission bits mean 0644 for
	// a regular file, 0755 for a directory and 0777 for a symbolic link.
	Mode os.FileMode
	// Data is the content of a regular file.
	Data []byte
	// Link, if set, makes the entry a symbolic link to Link (taken as is).
	Link string
	// Hardlink, if set, makes the entry a hard link to the regular file at
	// the path Hardlink in the same layer.
	Hardlink string
	// Uid and Gid own the entry.
	Uid, Gid int
}

// Config is the part of the image config that a container run from the image
// inherits.
type Config struct {
	Entrypoint []string
	Cmd        []string
	// Env entries are "NAME=value". Docker adds a default PATH to a
	// container whose image sets none.
	Env        []string
	User       string
	WorkingDir string
	// ExposedPorts are "80/tcp", "53/udp" or "8080" (taken as tcp).
	ExposedPorts []string
	Labels       map[string]string
}

// Permission bits of a tar header that os.FileMode keeps outside Perm().
const (
	tarSetuid = 0o4000
	tarSetgid = 0o2000
	tarSticky = 0o1000
)

// Archive writes to w a `docker load` archive of an image with one layer
// made of files, run with cfg, and tagged with each of refs ("name:tag"; a
// ref with no tag gets ":latest"; a digest is not allowed). It returns the
// image ID, "sha256:" and the hex SHA-256 of the image config, which is what
// the engine reports once the archive is loaded.
func Archive(w io.Writer, refs []string, files []File, cfg Config) (imageID string, err error) {
	tags := make([]string, 0, len(refs))
	for _, r := range refs {
		t, err := normalizeRef(r)
		if err != nil {
			return "", err
		}
		tags = append(tags, t)
	}

	var layer bytes.Buffer
	diffID, err := Layer(&layer, files)
	if err != nil {
		return "", err
	}
	layerHex := strings.TrimPrefix(diffID, "sha256:")

	configJSON, err := ImageConfig(cfg, []string{diffID})
	if err != nil {
		return "", err
	}
	configSum := sha256.Sum256(configJSON)
	configHex := hex.EncodeToString(configSum[:])

	manifest, err := json.Marshal([]manifestEntry{{
		Config:   configHex + ".json",
		RepoTags: tags,
		Layers:   []string{layerHex + "/layer.tar"},
	}})
	if err != nil {
		return "", err
	}

	// The legacy "repositories" file: {"name": {"tag": "<top layer id>"}}.
	repos := map[string]map[string]string{}
	for _, t := range tags {
		i := strings.LastIndex(t, ":")
		name, tag := t[:i], t[i+1:]
		if repos[name] == nil {
			repos[name] = map[string]string{}
		}
		repos[name][tag] = layerHex
	}
	reposJSON, err := json.Marshal(repos)
	if err != nil {
		return "", err
	}

	v1JSON, err := json.Marshal(v1Image{
		ID:           layerHex,
		Created:      Epoch,
		Config:       containerConfig(cfg),
		Architecture: runtime.GOARCH,
		OS:           "linux",
	})
	if err != nil {
		return "", err
	}

	tw := tar.NewWriter(w)
	type member struct {
		name string
		data []byte
		dir  bool
	}
	entries := []member{
		{name: layerHex + "/", dir: true},
		{name: layerHex + "/VERSION", data: []byte("1.0")},
		{name: layerHex + "/json", data: v1JSON},
		{name: layerHex + "/layer.tar", data: layer.Bytes()},
		{name: configHex + ".json", data: configJSON},
		{name: "manifest.json", data: manifest},
	}
	if len(tags) > 0 {
		entries = append(entries, member{name: "repositories", data: reposJSON})
	}
	for _, e := range entries {
		h := &tar.Header{
			Name:     e.name,
			Mode:     0o644,
			Size:     int64(len(e.data)),
			ModTime:  Epoch,
			Typeflag: tar.TypeReg,
		}
		if e.dir {
			h.Mode, h.Size, h.Typeflag = 0o755, 0, tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return "", err
		}
		if _, err := tw.Write(e.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return "sha256:" + configHex, nil
}

// Layer writes to w the uncompressed layer tar of files (see File) and
// returns its diff ID, "sha256:" and the hex SHA-256 of what it wrote.
//
// Entries come sorted by path, parents first; hard links come last so that
// their targets exist when the engine extracts them.
func Layer(w io.Writer, files []File) (diffID string, err error) {
	type entry struct {
		name string // cleaned, no leading slash
		f    File
	}
	byName := map[string]*entry{}
	var explicit []*entry
	for _, f := range files {
		name, err := cleanPath(f.Path)
		if err != nil {
			return "", err
		}
		if byName[name] != nil {
			return "", fmt.Errorf("imagebuild: %q given twice", f.Path)
		}
		if f.Hardlink != "" && f.Link != "" {
			return "", fmt.Errorf("imagebuild: %q is both a hard link and a symbolic link", f.Path)
		}
		e := &entry{name: name, f: f}
		byName[name] = e
		explicit = append(explicit, e)
	}
	// Implied parent directories.
	for _, e := range explicit {
		for dir := path.Dir(e.name); dir != "."; dir = path.Dir(dir) {
			if p := byName[dir]; p != nil {
				if !p.f.Mode.IsDir() || p.f.Link != "" || p.f.Hardlink != "" {
					return "", fmt.Errorf("imagebuild: %q is inside %q, which is not a directory", e.f.Path, p.f.Path)
				}
				continue
			}
			byName[dir] = &entry{name: dir, f: File{Path: "/" + dir, Mode: os.ModeDir | 0o755}}
		}
	}
	// Hard link targets must be regular files of the layer.
	linkNames := map[string]string{}
	for _, e := range explicit {
		if e.f.Hardlink == "" {
			continue
		}
		target, err := cleanPath(e.f.Hardlink)
		if err != nil {
			return "", fmt.Errorf("imagebuild: hard link %q: %w", e.f.Path, err)
		}
		t := byName[target]
		if t == nil || t.f.Hardlink != "" || t.f.Link != "" || t.f.Mode.IsDir() {
			return "", fmt.Errorf("imagebuild: hard link %q: target %q is not a regular file of the layer", e.f.Path, e.f.Hardlink)
		}
		linkNames[e.name] = target
	}

	all := make([]*entry, 0, len(byName))
	for _, e := range byName {
		all = append(all, e)
	}
	sort.Slice(all, func(i, j int) bool {
		li, lj := all[i].f.Hardlink != "", all[j].f.Hardlink != ""
		if li != lj {
			return lj
		}
		return all[i].name < all[j].name
	})

	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(w, h))
	for _, e := range all {
		f := e.f
		hdr := &tar.Header{
			Name:    e.name,
			ModTime: Epoch,
			Uid:     f.Uid,
			Gid:     f.Gid,
		}
		hdr.Mode = tarMode(f)
		var data []byte
		switch {
		case f.Hardlink != "":
			// A hard link shares its target's inode; the header says
			// the same mode and owner for readers that look.
			hdr.Typeflag = tar.TypeLink
			hdr.Linkname = linkNames[e.name]
			t := byName[hdr.Linkname].f
			hdr.Mode, hdr.Uid, hdr.Gid = tarMode(t), t.Uid, t.Gid
		case f.Link != "":
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = f.Link
		case f.Mode.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		default:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.Data))
			data = f.Data
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", fmt.Errorf("imagebuild: %s: %w", f.Path, err)
		}
		if _, err := tw.Write(data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// tarMode is the tar header mode of f: permission bits (or the default for
// its kind when it has none) and the setuid, setgid and sticky bits.
func tarMode(f File) int64 {
	mode := int64(f.Mode.Perm())
	if mode == 0 {
		switch {
		case f.Link != "":
			mode = 0o777
		case f.Mode.IsDir():
			mode = 0o755
		default:
			mode = 0o644
		}
	}
	if f.Mode&os.ModeSetuid != 0 {
		mode |= tarSetuid
	}
	if f.Mode&os.ModeSetgid != 0 {
		mode |= tarSetgid
	}
	if f.Mode&os.ModeSticky != 0 {
		mode |= tarSticky
	}
	return mode
}

// ImageConfig returns the image config JSON (the OCI/Docker image config:
// architecture, os, config, rootfs, history) for cfg and the layers' diff
// IDs, for runtime.GOARCH and linux.
func ImageConfig(cfg Config, diffIDs []string) ([]byte, error) {
	ids := append([]string{}, diffIDs...)
	hist := make([]history, len(ids))
	for i := range hist {
		hist[i] = history{Created: Epoch, CreatedBy: "cri-compose imagebuild"}
	}
	return json.Marshal(imageConfig{
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Created:      Epoch,
		Config:       containerConfig(cfg),
		RootFS:       rootFS{Type: "layers", DiffIDs: ids},
		History:      hist,
	})
}

type manifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

type imageConfig struct {
	Architecture string              `json:"architecture"`
	OS           string              `json:"os"`
	Created      time.Time           `json:"created"`
	Config       containerConfigJSON `json:"config"`
	RootFS       rootFS              `json:"rootfs"`
	History      []history           `json:"history,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by,omitempty"`
}

type v1Image struct {
	ID           string              `json:"id"`
	Created      time.Time           `json:"created"`
	Config       containerConfigJSON `json:"config"`
	Architecture string              `json:"architecture"`
	OS           string              `json:"os"`
}

type containerConfigJSON struct {
	User         string              `json:"User,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
}

func containerConfig(cfg Config) containerConfigJSON {
	c := containerConfigJSON{
		User:       cfg.User,
		Env:        cfg.Env,
		Entrypoint: cfg.Entrypoint,
		Cmd:        cfg.Cmd,
		WorkingDir: cfg.WorkingDir,
		Labels:     cfg.Labels,
	}
	if len(cfg.ExposedPorts) > 0 {
		c.ExposedPorts = map[string]struct{}{}
		for _, p := range cfg.ExposedPorts {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			c.ExposedPorts[p] = struct{}{}
		}
	}
	return c
}

// cleanPath turns "/a/b/../c" into "a/c" and refuses the root and paths that
// leave it.
func cleanPath(p string) (string, error) {
	c := path.Clean("/" + p)
	if c == "/" {
		return "", fmt.Errorf("imagebuild: path %q names the root", p)
	}
	if strings.Contains(p, "\x00") {
		return "", errors.New("imagebuild: path holds a NUL byte")
	}
	return c[1:], nil
}

// normalizeRef checks a "name[:tag]" reference and adds ":latest" when it has
// no tag. The engine does the full validation when it loads the archive.
func normalizeRef(ref string) (string, error) {
	if ref == "" {
		return "", errors.New("imagebuild: empty image reference")
	}
	if strings.Contains(ref, "@") {
		return "", fmt.Errorf("imagebuild: %q: a loaded image can be tagged but not given a digest", ref)
	}
	if strings.ContainsAny(ref, " \t\r\n") {
		return "", fmt.Errorf("imagebuild: %q: invalid image reference", ref)
	}
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		if i == len(ref)-1 {
			return "", fmt.Errorf("imagebuild: %q: empty tag", ref)
		}
		return ref, nil
	}
	return ref + ":latest", nil
}
