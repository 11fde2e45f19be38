// Package critest makes the images that critest (cri-tools' CRI validation
// suite, v1.37.0) runs, under the exact upstream names its specs hard-code,
// from what a machine without a registry has: Debian's busybox-static (see
// test/images) and the small static Go programs of cmd/ beside this file.
//
// cmd/curl, cmd/nc, cmd/dig and cmd/getent are built here too but go into
// no image of this package: they stand in for Alpine's curl and
// netcat-openbsd in test/images/kubee2e's agnhost, and for bind-tools' dig
// and the C library's getent there and in its glibc-dns-testing (the last
// two share internal/dnsstub: resolv.conf and one DNS exchange; their
// tests serve DNS with internal/dnstest).
//
// test/conformance/run builds the programs with Build, the images with
// Images, and pushes them to a local registry that cri-compose pulls from
// through --registry-mirror, so that critest's image specs really pull.
//
// What each image holds, and why (every spec named is in cri-tools'
// pkg/validate):
//
//   - Busybox (registry.k8s.io/e2e-test-images/busybox:1.29-2), the default
//     container image: busybox with one hard link per applet (so that a
//     MaskedPaths entry for /bin/ls masks ls alone) and, given a Shell, a sh
//     that executes /bin/ls rather than running ls in process; users nobody
//     and www-data; cmd/pgrep and cmd/ipcs, which Debian's busybox lacks
//     (execSync with timeout runs `pgrep sleep`, the HostIpc specs `ipcs -m`).
//     The other busybox-based images below have the same files.
//   - Nginx (…/nginx:1.14-2) and HostnetNginx (…/hostnet-nginx-ARCH, port
//     12003): busybox plus cmd/webserver as /usr/sbin/nginx: HTTP 200 on / ,
//     /var/run/nginx.pid, process name nginx, "master process" in
//     /proc/1/cmdline.
//   - Httpd (…/httpd:2.4.39-4): busybox plus cmd/webserver as httpd: HTTP on
//     :80 and a log line naming httpd.
//   - NoNewPrivs (…/nonewprivs:1.3): cmd/nnp, setuid root, as the entrypoint.
//   - the user images (USER 1002, www-data, 1003:1004, www-data:1004) and the
//     predefined-group one (USER 1000, a member of group 50000).
//   - test-image-{1,2,3,latest} and test-image-tag:{test,all}: six distinct
//     images; test-image-tags:{1,2,3}: one image under three tags.
//   - Pause (registry.k8s.io/pause:3.9, also k8s.gcr.io/pause:3.9): one
//     image under both names, distinct from cri-compose's own pause image.
//
// DigestImage, the one name critest pulls by digest, cannot be made: its
// digest is that of the upstream image's manifest.
package critest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/cri-compose/cri-compose/pkg/imagebuild"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/registry"
)

// The images' names in critest v1.37.0.
const (
	E2EPrefix     = "registry.k8s.io/e2e-test-images/"
	StagingPrefix = "gcr.io/k8s-staging-cri-tools/"

	Busybox      = E2EPrefix + "busybox:1.29-2"
	Nginx        = E2EPrefix + "nginx:1.14-2"
	Httpd        = E2EPrefix + "httpd:2.4.39-4"
	NoNewPrivs   = E2EPrefix + "nonewprivs:1.3"
	HostnetNginx = StagingPrefix + "hostnet-nginx-" + runtime.GOARCH + ":latest"
	Pause        = "registry.k8s.io/pause:3.9"
	PauseOldName = "k8s.gcr.io/pause:3.9"

	// DigestImage is pulled by the spec "public image with digest should be
	// pulled and removed"; no image made here can have its digest.
	DigestImage = StagingPrefix + "test-image-digest@sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf"
)

// Programs are the executables that the images carry: static ones built by
// Build, and optionally a Shell.
type Programs struct {
	Pgrep, Ipcs, Webserver, NNP []byte
	// Curl, Nc, Dig and Getent are for the Kubernetes e2e images
	// (test/images/kubee2e), whose programs are built here too: cmd/curl;
	// cmd/nc, the client side of netcat-openbsd; cmd/dig, BIND's dig for
	// the forms the DNS specs run; cmd/getent, glibc's getent hosts.
	Curl, Nc, Dig, Getent []byte
	// Shell, when set, is the images' sh (see Shell). Without it sh is
	// busybox-static's, and critest's MaskedPaths spec fails.
	Shell *Shell
}

// programDirs maps the programs to their packages under cmd/.
var programDirs = []struct {
	name string
	dst  func(*Programs) *[]byte
}{
	{"pgrep", func(p *Programs) *[]byte { return &p.Pgrep }},
	{"ipcs", func(p *Programs) *[]byte { return &p.Ipcs }},
	{"webserver", func(p *Programs) *[]byte { return &p.Webserver }},
	{"nnp", func(p *Programs) *[]byte { return &p.NNP }},
	{"curl", func(p *Programs) *[]byte { return &p.Curl }},
	{"nc", func(p *Programs) *[]byte { return &p.Nc }},
	{"dig", func(p *Programs) *[]byte { return &p.Dig }},
	{"getent", func(p *Programs) *[]byte { return &p.Getent }},
}

// Build compiles the programs of cmd/ (the standard library and
// golang.org/x/net's dnsmessage only) into dir as static
// executables for linux/runtime.GOARCH with goCmd ("go" when empty), run in
// repoRoot, the root of cri-compose's module, and returns them.
func Build(ctx context.Context, goCmd, repoRoot, dir string) (Programs, error) {
	if goCmd == "" {
		goCmd = "go"
	}
	cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-ldflags=-s -w", "-o", dir+string(filepath.Separator),
		"./test/images/critest/cmd/...")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Programs{}, fmt.Errorf("critest images: go build ./test/images/critest/cmd/...: %w\n%s", err, out.Bytes())
	}
	var p Programs
	for _, d := range programDirs {
		b, err := os.ReadFile(filepath.Join(dir, d.name))
		if err != nil {
			return Programs{}, fmt.Errorf("critest images: %w", err)
		}
		*d.dst(&p) = b
	}
	return p, nil
}

// Image is one image: its names ("host/path:tag", the first one also names
// its archive), the files of its one layer and its config.
type Image struct {
	Refs   []string
	Files  []imagebuild.File
	Config imagebuild.Config
}

// Archive writes the image's `docker load` archive, tagged with all its
// Refs, to w and returns its image ID.
func (img Image) Archive(w io.Writer) (string, error) {
	return imagebuild.Archive(w, img.Refs, img.Files, img.Config)
}

// Push pushes the image to reg under the mirror path of each of its names
// (registry.PushMirrored), for a runtime that mirrors their registries to
// reg.
func (img Image) Push(ctx context.Context, reg *registry.Registry) error {
	var archive bytes.Buffer
	if _, err := img.Archive(&archive); err != nil {
		return fmt.Errorf("image %s: %w", img.Refs[0], err)
	}
	return reg.PushMirrored(ctx, archive.Bytes(), img.Refs...)
}

// Images returns every image critest needs (see the package doc), made with
// the programs p. Only Busybox's files need the host: images.BusyboxPath.
func Images(p Programs) ([]Image, error) {
	for _, d := range programDirs {
		if len(*d.dst(&p)) == 0 {
			return nil, fmt.Errorf("critest images: program %s is missing", d.name)
		}
	}
	bb, err := images.BusyboxFiles()
	if err != nil {
		return nil, err
	}
	// base is busybox with the applets Debian's lacks, and /var/run.
	base := func(marker string, extra ...imagebuild.File) []imagebuild.File {
		files := p.Shell.install(slices.Clone(bb))
		files = append(files,
			imagebuild.File{Path: "/bin/pgrep", Mode: 0o755, Data: p.Pgrep},
			imagebuild.File{Path: "/bin/ipcs", Mode: 0o755, Data: p.Ipcs},
			imagebuild.File{Path: "/var/run", Mode: os.ModeDir | 0o755},
			// Names the image, and makes images of the same files distinct.
			imagebuild.File{Path: "/etc/critest-image", Mode: 0o644, Data: []byte(marker + "\n")},
		)
		return append(files, extra...)
	}
	shell := images.BusyboxConfig() // PATH, Cmd ["sh"]
	withUser := func(user string) imagebuild.Config {
		c := shell
		c.User = user
		return c
	}

	out := []Image{
		{Refs: []string{Busybox}, Files: base(Busybox), Config: shell},
		{
			Refs:   []string{Nginx},
			Files:  base(Nginx, imagebuild.File{Path: "/usr/sbin/nginx", Mode: 0o755, Data: p.Webserver}),
			Config: webConfig([]string{"nginx", "-g", "daemon off;"}, 80, nil),
		},
		{
			Refs:  []string{HostnetNginx},
			Files: base(HostnetNginx, imagebuild.File{Path: "/usr/sbin/nginx", Mode: 0o755, Data: p.Webserver}),
			Config: webConfig([]string{"nginx", "-g", "daemon off;"}, 12003,
				[]string{"WEBSERVER_LISTEN=:12003"}),
		},
		{
			Refs:  []string{Httpd},
			Files: base(Httpd, imagebuild.File{Path: "/usr/local/apache2/bin/httpd", Mode: 0o755, Data: p.Webserver}),
			Config: func() imagebuild.Config {
				c := webConfig([]string{"httpd", "-DFOREGROUND"}, 80, nil)
				c.Env = []string{"PATH=/usr/local/apache2/bin:" + strings.TrimPrefix(images.DefaultPath, "PATH=")}
				c.WorkingDir = "/usr/local/apache2"
				return c
			}(),
		},
		{
			Refs: []string{NoNewPrivs},
			Files: base(NoNewPrivs, imagebuild.File{
				Path: "/usr/local/bin/nnp", Mode: os.ModeSetuid | os.ModeSetgid | 0o755, Data: p.NNP,
			}),
			Config: imagebuild.Config{Env: []string{images.DefaultPath}, Entrypoint: []string{"/usr/local/bin/nnp"}},
		},
		{Refs: []string{StagingPrefix + "test-image-user-uid:latest"}, Files: base("test-image-user-uid"), Config: withUser("1002")},
		{Refs: []string{StagingPrefix + "test-image-user-username:latest"}, Files: base("test-image-user-username"), Config: withUser("www-data")},
		{Refs: []string{StagingPrefix + "test-image-user-uid-group:latest"}, Files: base("test-image-user-uid-group"), Config: withUser("1003:1004")},
		{Refs: []string{StagingPrefix + "test-image-user-username-group:latest"}, Files: base("test-image-user-username-group"), Config: withUser("www-data:1004")},
		{
			Refs:   []string{StagingPrefix + "test-image-predefined-group:latest"},
			Files:  predefinedGroup(base("test-image-predefined-group")),
			Config: withUser("1000"),
		},
		{
			Refs:   []string{StagingPrefix + "test-image-tags:1", StagingPrefix + "test-image-tags:2", StagingPrefix + "test-image-tags:3"},
			Files:  base("test-image-tags"),
			Config: shell,
		},
		{
			Refs: []string{Pause, PauseOldName},
			Files: append(slices.Clone(pause.Files()),
				imagebuild.File{Path: "/etc/critest-image", Mode: 0o644, Data: []byte(Pause + "\n")}),
			Config: pause.Config(),
		},
	}
	for _, name := range []string{"test-image-1", "test-image-2", "test-image-3", "test-image-latest", "test-image-tag:test", "test-image-tag:all"} {
		ref := StagingPrefix + name
		if !strings.Contains(name, ":") {
			ref += ":latest"
		}
		out = append(out, Image{Refs: []string{ref}, Files: base(ref), Config: shell})
	}
	return out, nil
}

// webConfig is the config of a web server image.
func webConfig(cmd []string, port int, env []string) imagebuild.Config {
	return imagebuild.Config{
		Env:          append([]string{images.DefaultPath}, env...),
		Cmd:          cmd,
		ExposedPorts: []string{fmt.Sprintf("%d/tcp", port)},
	}
}

// predefinedGroup adds the user default-user (uid 1000) and the group
// group-defined-in-image (gid 50000) it belongs to, as cri-tools'
// images/image-predefined-group does with adduser and addgroup.
func predefinedGroup(files []imagebuild.File) []imagebuild.File {
	return WithUserInGroup(files, "default-user", 1000, "group-defined-in-image", 50000)
}

// WithUserInGroup adds to busybox's files a user (with a group and a home
// of the same name) who is also in a second group, as an image's
// Dockerfile does with adduser and addgroup.
func WithUserInGroup(files []imagebuild.File, user string, uid int, group string, gid int) []imagebuild.File {
	out := files[:0:0]
	for _, f := range files {
		switch f.Path {
		case "/etc/passwd":
			f.Data = append(slices.Clone(f.Data), fmt.Sprintf("%s:x:%d:%d:Linux User,,,:/home/%s:/bin/sh\n", user, uid, uid, user)...)
		case "/etc/group":
			f.Data = append(slices.Clone(f.Data), fmt.Sprintf("%s:x:%d:\n%s:x:%d:%s\n", user, uid, group, gid, user)...)
		}
		out = append(out, f)
	}
	return append(out, imagebuild.File{Path: "/home/" + user, Mode: os.ModeDir | 0o755, Uid: uid, Gid: uid})
}
