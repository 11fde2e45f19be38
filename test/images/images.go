// Package images builds the images that cri-compose's tests run, in process
// and without a registry, with pkg/imagebuild, and loads them into an engine
// through pkg/dockerapi.
//
// The machines that run the tests reach no registry, so every test image is
// made here from what the host has: Busybox from Debian's busybox-static
// (/bin/busybox; `make test` installs it through hack/ensure-tools.sh).
package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/imagebuild"
)

// BusyboxPath is the static busybox binary the Busybox image is made of.
var BusyboxPath = "/bin/busybox"

// ErrNoBusybox says that BusyboxPath is missing: install Debian's
// busybox-static (hack/ensure-tools.sh does).
var ErrNoBusybox = errors.New("images: no static busybox (apt-get install -y busybox-static, or bash hack/ensure-tools.sh)")

// DefaultPath is the PATH of the images built here.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Passwd and Group are /etc/passwd and /etc/group of the Busybox image:
// root (0), www-data (33) and nobody (65534, group also named nogroup).
const (
	Passwd = "root:x:0:0:root:/root:/bin/sh\n" +
		"www-data:x:33:33:www-data:/var/www:/bin/false\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	Group = "root:x:0:\n" +
		"www-data:x:33:\n" +
		"nobody:x:65534:\n" +
		"nogroup:x:65534:\n"
)

// Busybox builds a busybox image tagged ref and loads it into the engine
// behind c. The image has /bin/busybox with one hard link per applet in
// /bin (and /usr/bin/env for scripts' #! lines), /etc/passwd and /etc/group
// (see Passwd and Group), /tmp (1777), /root, /var/www, PATH set and Cmd
// ["sh"]. It returns an error wrapping ErrNoBusybox when BusyboxPath is
// missing.
func Busybox(ctx context.Context, c *dockerapi.Client, ref string) error {
	var buf bytes.Buffer
	if _, err := BusyboxArchive(&buf, ref); err != nil {
		return err
	}
	if err := c.ImageLoad(ctx, &buf); err != nil {
		return fmt.Errorf("images: loading %s: %w", ref, err)
	}
	return nil
}

// BusyboxArchive writes the `docker load` archive of the Busybox image,
// tagged ref, to w and returns its image ID.
func BusyboxArchive(w io.Writer, ref string) (imageID string, err error) {
	files, err := busyboxFiles()
	if err != nil {
		return "", err
	}
	return imagebuild.Archive(w, []string{ref}, files, BusyboxConfig())
}

// BusyboxConfig is the image config of the Busybox image.
func BusyboxConfig() imagebuild.Config {
	return imagebuild.Config{Env: []string{DefaultPath}, Cmd: []string{"sh"}}
}

// BusyboxFiles returns the content of the Busybox image's layer.
func BusyboxFiles() ([]imagebuild.File, error) { return busyboxFiles() }

// busyboxFiles reads the binary and its applet list once per process.
var busyboxFiles = sync.OnceValues(func() ([]imagebuild.File, error) { return BusyboxFilesOf(BusyboxPath) })

// BusyboxFilesOf is the Busybox image's layer made with the static busybox
// binary at path in place of BusyboxPath, with a hard link for each applet
// that binary has.
func BusyboxFilesOf(path string) ([]imagebuild.File, error) {
	bin, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is missing", ErrNoBusybox, path)
	}
	if err != nil {
		return nil, err
	}
	out, err := exec.Command(path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("images: %s --list: %w", path, err)
	}
	files := []imagebuild.File{
		{Path: "/bin/busybox", Mode: 0o755, Data: bin},
		{Path: "/usr/bin/env", Hardlink: "/bin/busybox"},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(Passwd)},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(Group)},
		{Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777},
		{Path: "/root", Mode: os.ModeDir | 0o700},
		{Path: "/var/www", Mode: os.ModeDir | 0o755, Uid: 33, Gid: 33},
	}
	n := 0
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		files = append(files, imagebuild.File{Path: "/bin/" + applet, Hardlink: "/bin/busybox"})
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("images: %s --list names no applets", path)
	}
	return files, nil
}

// BusyboxWithProgram builds the Go main package pkg (an import path the
// calling module resolves) as a static binary and loads, tagged ref, the
// Busybox image with that binary added at path.
func BusyboxWithProgram(ctx context.Context, c *dockerapi.Client, ref, pkg, path string) error {
	var buf bytes.Buffer
	if err := BusyboxWithProgramArchive(ctx, &buf, ref, pkg, path); err != nil {
		return err
	}
	if err := c.ImageLoad(ctx, &buf); err != nil {
		return fmt.Errorf("images: loading %s: %w", ref, err)
	}
	return nil
}

// BusyboxWithProgramArchive writes that image as a `docker save` archive,
// for a runtime other than the engine (containerd's `ctr images import`).
func BusyboxWithProgramArchive(ctx context.Context, w io.Writer, ref, pkg, path string) error {
	dir, err := os.MkdirTemp("", "images-program-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := dir + "/program"
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("images: build %s: %v\n%s", pkg, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	files, err := busyboxFiles()
	if err != nil {
		return err
	}
	files = append(files, imagebuild.File{Path: path, Mode: 0o755, Data: data})
	_, err = imagebuild.Archive(w, []string{ref}, files, BusyboxConfig())
	return err
}
