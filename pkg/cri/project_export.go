package cri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// What an export ships at most: the content of the pod's bind mounts is in
// the one response message, so it is capped. A mount that does not fit in
// what is left stays a bind of the host path (with a comment saying so).
const (
	exportMaxBytes = 64 << 20
	exportMaxFiles = 20000
)

// exportPauseDir is the build context shipped for cri-compose's built-in
// pause image, which no registry serves.
const exportPauseDir = "pause"

// pauseDockerfile builds the built-in pause image from its binary.
const pauseDockerfile = `# cri-compose's pause process: it holds the pod's namespaces. ` + "`docker compose up`" + `
# builds this image when the engine does not have it yet.
FROM scratch
COPY pause ` + pause.Path + `
ENTRYPOINT ["` + pause.Path + `"]
`

// ExportProject renders a pod as a standalone compose project: the pure
// part is sandbox.ExportYAML; this handler reads what the pod's bind mounts
// hold on this host and ships it beside the file.
func (p *projectsService) ExportProject(ctx context.Context, r *cricomposev1.ExportProjectRequest) (*cricomposev1.ExportProjectResponse, error) {
	s := p.s
	if r.GetPodSandboxId() == "" {
		return nil, grpcError(fmt.Errorf("export: pod_sandbox_id is required: %w", sandbox.ErrInvalid))
	}
	if err := s.store.WaitSynced(ctx); err != nil {
		return nil, grpcError(err)
	}
	sb, err := s.store.Sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, grpcError(fmt.Errorf("export: %w", err))
	}
	md := sb.Config.GetMetadata()
	all := s.store.ContainersOf(sb.ID)
	e := sandbox.Export{
		Name:       sandbox.ExportName(md),
		Pod:        md.GetNamespace() + "/" + md.GetName(),
		SandboxID:  sb.ID,
		Services:   []types.ServiceConfig{*sb.Service},
		Containers: map[string]string{},
	}
	for _, c := range all {
		e.Containers[c.ID] = c.Service
	}
	for _, c := range newestAttempts(all) {
		e.Services = append(e.Services, *c.ServiceCfg)
	}
	if sb.Service.NetworkMode != "host" {
		e.Network = sb.Network
	}
	resp := &cricomposev1.ExportProjectResponse{ProjectName: e.Name}
	if sb.Service.Image == pause.Ref() {
		e.InfraBuild = "./" + exportPauseDir
		resp.Files = append(resp.Files,
			&cricomposev1.File{Path: exportPauseDir, Mode: 0o755, Directory: true},
			&cricomposev1.File{Path: exportPauseDir + "/Dockerfile", Mode: 0o644, Content: []byte(pauseDockerfile)},
			&cricomposev1.File{Path: exportPauseDir + "/pause", Mode: 0o755, Content: pause.Binary()},
		)
	}
	e.Mounts = sandbox.ExportMounts(e.Services)
	budget := &exportBudget{bytes: exportMaxBytes, files: exportMaxFiles}
	for i := range e.Mounts {
		files, err := s.exportMount(ctx, &e.Mounts[i], budget)
		if err != nil {
			return nil, grpcError(fmt.Errorf("export %s: %w", e.Pod, err))
		}
		resp.Files = append(resp.Files, files...)
	}
	yml, warnings, err := sandbox.ExportYAML(e)
	if err != nil {
		return nil, grpcError(err)
	}
	sort.SliceStable(resp.Files, func(i, j int) bool { return resp.Files[i].Path < resp.Files[j].Path })
	resp.ComposeYaml, resp.Warnings = yml, warnings
	return resp, nil
}

// exportBudget is what is left of the export's caps.
type exportBudget struct {
	bytes int64
	files int
}

// exportMount decides what one bind mount becomes (m.Kind, m.Note) from
// what its host path holds, and returns the files to ship for it. Only a
// cancelled request is an error: anything the host path does not allow
// leaves the mount a bind of the host path, with a note saying why.
func (s *Server) exportMount(ctx context.Context, m *sandbox.ExportMount, budget *exportBudget) ([]*cricomposev1.File, error) {
	keep := func(format string, args ...any) ([]*cricomposev1.File, error) {
		m.Kind, m.Note = sandbox.MountHostPath, fmt.Sprintf(format, args...)+": it still binds the host path"
		return nil, nil
	}
	if !s.docker.IsLocal() {
		return keep("the engine runs on another host than cri-compose, which cannot read its paths")
	}
	// The engine follows a symbolic link at the source; so does the export.
	root, err := filepath.EvalSymlinks(m.Source)
	var fi fs.FileInfo
	if err == nil {
		fi, err = os.Stat(root)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// The engine makes a missing source an empty directory.
		m.Kind = sandbox.MountVolume
		return nil, nil
	case err != nil:
		return keep("cannot be read (%v)", err)
	case fi.Mode().IsRegular():
		if fi.Size() > budget.bytes || budget.files < 1 {
			return keep("holds %s, more than the %s left of the export's %s (copy it there)",
				sizeString(fi.Size()), sizeString(budget.bytes), sizeString(exportMaxBytes))
		}
		b, err := readRegular(root, budget.bytes)
		if err != nil {
			return keep("cannot be read (%v)", err)
		}
		budget.bytes -= int64(len(b))
		budget.files--
		m.Kind = sandbox.MountFiles
		return []*cricomposev1.File{{Path: m.Path, Content: b, Mode: uint32(fi.Mode().Perm())}}, nil
	case fi.IsDir():
	default:
		return keep("%s cannot be shipped", fileKind(fi.Mode()))
	}

	// A directory: list it first, to know whether it fits.
	type entry struct {
		rel  string
		mode fs.FileMode
		size int64
	}
	var (
		entries []entry
		skipped []string
		total   int64
	)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsRegular():
			total += info.Size()
		case mode.IsDir(), mode&fs.ModeSymlink != 0:
		default:
			skipped = append(skipped, filepath.ToSlash(rel)+" ("+fileKind(mode)+")")
			return nil
		}
		entries = append(entries, entry{rel: filepath.ToSlash(rel), mode: info.Mode(), size: info.Size()})
		if len(entries) > budget.files || total > budget.bytes {
			return errTooBig
		}
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, errTooBig):
		return keep("holds more than the %s and %d files left of the export's %s (copy it there)",
			sizeString(budget.bytes), budget.files, sizeString(exportMaxBytes))
	case err != nil:
		return keep("cannot be read (%v)", err)
	case len(entries) == 0 && len(skipped) == 0:
		m.Kind = sandbox.MountVolume // an empty directory starts empty as a volume too
		return nil, nil
	}

	files := []*cricomposev1.File{{Path: m.Path, Directory: true, Mode: uint32(fi.Mode().Perm())}}
	var used int64
	for _, en := range entries {
		f := &cricomposev1.File{Path: path.Join(m.Path, en.rel), Mode: uint32(en.mode.Perm())}
		src := filepath.Join(root, filepath.FromSlash(en.rel))
		switch {
		case en.mode.IsDir():
			f.Directory = true
		case en.mode&fs.ModeSymlink != 0:
			// Shipped as a link: the container resolves it in its own
			// view, as it did (kubelet's ..data links of a configMap).
			target, err := os.Readlink(src)
			if err != nil {
				return keep("cannot be read (%v)", err)
			}
			f.SymlinkTarget, f.Mode = target, 0o777
		default:
			b, err := readRegular(src, budget.bytes-used)
			if err != nil {
				return keep("cannot be read (%v)", err)
			}
			used += int64(len(b))
			f.Content = b
		}
		files = append(files, f)
	}
	budget.bytes -= used
	budget.files -= len(entries)
	m.Kind = sandbox.MountFiles
	if len(skipped) > 0 {
		m.Note = fmt.Sprintf("left out what cannot be shipped: %s", strings.Join(skipped, ", "))
	}
	return files, nil
}

var errTooBig = errors.New("too big to export")

// readRegular reads a regular file of at most limit bytes. It never blocks
// on a file that became a FIFO since it was listed, and never follows a
// link that replaced it.
func readRegular(p string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is no longer a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s grew past what is left of the export's %s", p, sizeString(exportMaxBytes))
	}
	return b, nil
}

// fileKind names a file type that cannot be shipped.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// sizeString is n bytes for people: 512 B, 3.2 KiB, 64 MiB.
func sizeString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTPE"[exp]) + "iB"
}
