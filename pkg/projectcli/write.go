package projectcli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// ComposeFile is the name of the exported compose file in its folder.
const ComposeFile = "compose.yaml"

// WriteExport writes an export into dir: compose.yaml and its files beside
// it. dir must be missing or empty, unless replace is set: then the
// compose file and the folders the export writes (volumes/, pause/) are
// removed first, and whatever else dir holds is left alone.
//
// Every path is checked to stay inside dir; links are made last, so that
// nothing is ever written through one.
//
// The export holds the pod's environment values and what its mounts hold
// (secrets included): the compose file is 0600, and every folder the export
// makes that it does not ship with a mode of its own (dir when missing,
// volumes/ and the folders below it) is 0700, so that only the user who
// exported reads it. Shipped files and folders keep the modes they had in
// the pod, which its containers need.
func WriteExport(resp *cricomposev1.ExportProjectResponse, dir string, replace bool) error {
	files := append([]*cricomposev1.File(nil), resp.GetFiles()...)
	sort.SliceStable(files, func(i, j int) bool { return files[i].GetPath() < files[j].GetPath() })
	tops := map[string]bool{ComposeFile: true}
	for _, f := range files {
		p := filepath.FromSlash(f.GetPath())
		if !filepath.IsLocal(p) || p == ComposeFile {
			return fmt.Errorf("export names the file %q, which is not a path inside its folder", f.GetPath())
		}
		top, _, _ := strings.Cut(filepath.ToSlash(p), "/")
		tops[top] = true
	}

	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0 && !replace:
		return fmt.Errorf("%s is not empty (replace its export with --force)", dir)
	case len(entries) > 0:
		for top := range tops {
			if err := os.RemoveAll(filepath.Join(dir, top)); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	var dirs, links []*cricomposev1.File
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.GetPath()))
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("export names %s twice", f.GetPath())
		}
		switch {
		case f.GetDirectory():
			if err := os.MkdirAll(p, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, f)
		case f.GetSymlinkTarget() != "":
			links = append(links, f)
		default:
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(p, f.GetContent(), 0o600); err != nil {
				return err
			}
			if err := os.Chmod(p, fs.FileMode(f.GetMode()).Perm()); err != nil {
				return err
			}
		}
	}
	for _, f := range links {
		p := filepath.Join(dir, filepath.FromSlash(f.GetPath()))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.Symlink(f.GetSymlinkTarget(), p); err != nil {
			return err
		}
	}
	// Directories get their mode once they are filled (a read-only one
	// could not have been), the deepest first.
	for i := len(dirs) - 1; i >= 0; i-- {
		p := filepath.Join(dir, filepath.FromSlash(dirs[i].GetPath()))
		if err := os.Chmod(p, fs.FileMode(dirs[i].GetMode()).Perm()); err != nil {
			return err
		}
	}
	// Mode 0600 even over an old export's file (WriteFile keeps the mode
	// of a file that exists).
	p := filepath.Join(dir, ComposeFile)
	if err := os.WriteFile(p, resp.GetComposeYaml(), 0o600); err != nil {
		return err
	}
	return os.Chmod(p, 0o600)
}
