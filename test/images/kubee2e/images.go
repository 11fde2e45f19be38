// Package kubee2e makes the images that the Kubernetes e2e suite's
// [NodeConformance] specs (e2e.test v1.37.2) run, under the upstream names
// of its image manifest (k8s.io/kubernetes/test/utils/image), from what a
// machine without a registry has: upstream BusyBox 1.37.0 built from its
// release (test/toolcache's Busybox), Debian's bash-static, the small
// static programs of test/images/critest, and agnhost built from
// k8s.io/kubernetes/test/images/agnhost itself.
//
// /bin/sh is busybox's ash, as upstream's (the specs compare its error
// messages, "can't create /file: Read-only file system"). It is upstream's
// busybox and not Debian's busybox-static, because Debian's ash drops
// environment variables whose names are not shell identifiers when it runs
// a program, and the specs read configMap and secret keys such as "data-1"
// through `sh -c env`.
//
// What each image keeps of the upstream one:
//
//   - agnhost (2.66.1, and 2.55, which some specs still name): the real
//     agnhost at /agnhost (and /agnhost-2), ENTRYPOINT ["/agnhost"], CMD
//     ["pause"], the ports it exposes, /uploads, porter's localhost
//     certificate, and the user user-defined-in-image (uid 1000) in group
//     group-defined-in-image (gid 50000). Upstream is Alpine with curl,
//     bind-tools, iproute2, netcat-openbsd, bash and socat; here busybox
//     gives wget, nslookup and ip, bash is bash, curl is test/images/critest's
//     cmd/curl (a GET of an http:// URL with the flags the specs pass), and
//     nc is its cmd/nc at /bin/nc, in place of busybox's applet: the client
//     side of netcat-openbsd, with the -t, -u, -v, -z, -w, -W and -p the
//     specs pass and busybox's nc rejects. The DNS specs' tools, which
//     busybox lacks, are its cmd/dig at /usr/bin/dig (BIND's dig for
//     +[no]tcp, +search, +noall +answer, +short, @server, -p and -x, with
//     resolv.conf's search list and ndots) and cmd/getent at
//     /usr/bin/getent (getent hosts: /etc/hosts, then DNS as the C
//     library's resolver asks it).
//   - busybox (1.37.0-2): busybox 1.37.0 (defconfig, static, as Docker
//     Hub's busybox:1.37.0 that it mirrors) and its applets, Cmd ["sh"].
//   - glibc-dns-testing (2.1.1): busybox, Cmd ["sh"], and agnhost's dig
//     and getent at /usr/bin. Upstream is Debian with dnsutils and coredns;
//     the DNS specs run there the same dig and `getent hosts` commands as
//     in agnhost (getent follows glibc's: IPv6 first, then IPv4, each from
//     /etc/hosts and then DNS), and the hostnameOverride specs run sh,
//     hostname and `hostname -f`, which busybox answers from /etc/hosts as
//     glibc's resolver does.
//   - nginx (1.27.0-2 and 1.28.0-2): HTTP 200 on / at port 80 from
//     critest's webserver installed as /usr/sbin/nginx, beside busybox.
//   - nonroot (1.5): busybox with USER 1234.
//   - nonewprivs (1.4): nnp, setuid and setgid root, at /usr/local/bin/nnp
//     (prints its effective uid, as test/images/nonewprivs/nnp.go), CMD
//     ["nnp"], beside busybox.
//   - pause (registry.k8s.io/pause:3.10.2): cri-compose's own pause.
//   - coredns (registry.k8s.io/coredns/coredns at the version built), with
//     Programs.CoreDNS only: the cluster DNS of the networking suite.
package kubee2e

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"

	"github.com/cri-compose/cri-compose/pkg/imagebuild"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/images/critest"
)

// The images' names in e2e.test v1.37.2.
const (
	E2EPrefix = "registry.k8s.io/e2e-test-images/"

	Agnhost     = E2EPrefix + "agnhost:2.66.1"
	AgnhostPrev = E2EPrefix + "agnhost:2.55"
	Busybox     = E2EPrefix + "busybox:1.37.0-2"
	GlibcDNS    = E2EPrefix + "glibc-dns-testing:2.1.1"
	Nginx       = E2EPrefix + "nginx:1.27.0-2"
	NginxNew    = E2EPrefix + "nginx:1.28.0-2"
	NonRoot     = E2EPrefix + "nonroot:1.5"
	NoNewPrivs  = E2EPrefix + "nonewprivs:1.4"
	Pause       = "registry.k8s.io/pause:3.10.2"
)

// Programs are the executables the images carry.
type Programs struct {
	// Busybox is the path of a static upstream busybox, the base of every
	// image but pause (test/toolcache's Busybox builds it).
	Busybox string
	// Agnhost is k8s.io/kubernetes/test/images/agnhost, static.
	Agnhost []byte
	// PorterCert and PorterKey are agnhost's porter/localhost.crt and
	// localhost.key, which upstream adds at the image's root.
	PorterCert, PorterKey []byte
	// Critest holds the web server, nnp, curl, nc, dig and getent
	// (critest.Build).
	Critest critest.Programs
	// Bash is a static bash (BashStatic).
	Bash []byte
	// CoreDNS, if set, is a static coredns at CoreDNSVersion, for cluster
	// DNS (CoreDNSImage).
	CoreDNS        []byte
	CoreDNSVersion string
}

// CoreDNSImage is the name of the CoreDNS image at version (as
// kube-dns's Deployment of kubeadm names it).
func CoreDNSImage(version string) string { return "registry.k8s.io/coredns/coredns:" + version }

// BashStaticPath is the static bash agnhost carries as /bin/bash, as its
// Alpine image has: Debian's bash-static.
var BashStaticPath = "/bin/bash-static"

// BashStatic reads BashStaticPath.
func BashStatic() ([]byte, error) {
	b, err := os.ReadFile(BashStaticPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("kubee2e images: %s is missing (apt-get install -y bash-static, or bash hack/ensure-tools.sh)", BashStaticPath)
	}
	return b, err
}

// Images returns every image the NodeConformance specs pull (see the
// package doc), made with the programs p.
func Images(p Programs) ([]critest.Image, error) {
	switch {
	case len(p.Agnhost) == 0:
		return nil, fmt.Errorf("kubee2e images: agnhost is missing")
	case len(p.Critest.Webserver) == 0 || len(p.Critest.NNP) == 0 || len(p.Critest.Curl) == 0 || len(p.Critest.Nc) == 0 ||
		len(p.Critest.Dig) == 0 || len(p.Critest.Getent) == 0:
		return nil, fmt.Errorf("kubee2e images: the critest programs are missing")
	case len(p.Bash) == 0:
		return nil, fmt.Errorf("kubee2e images: bash is missing")
	case p.Busybox == "":
		return nil, fmt.Errorf("kubee2e images: busybox is missing")
	}
	bb, err := images.BusyboxFilesOf(p.Busybox)
	if err != nil {
		return nil, err
	}
	base := func(marker string, extra ...imagebuild.File) []imagebuild.File {
		files := append(slices.Clone(bb),
			imagebuild.File{Path: "/var/run", Mode: os.ModeDir | 0o755},
			// Names the image, and makes images of the same files distinct.
			imagebuild.File{Path: "/etc/kube-e2e-image", Mode: 0o644, Data: []byte(marker + "\n")})
		return append(files, extra...)
	}
	shell := images.BusyboxConfig()
	nonroot := shell
	nonroot.User = "1234"

	imgs := []critest.Image{
		{Refs: []string{Agnhost, AgnhostPrev}, Files: agnhostFiles(base(Agnhost), p), Config: imagebuild.Config{
			Env:          []string{images.DefaultPath},
			Entrypoint:   []string{"/agnhost"},
			Cmd:          []string{"pause"},
			ExposedPorts: []string{"80/tcp", "8080/tcp", "8081/tcp", "9376/tcp", "5000/tcp"},
		}},
		{Refs: []string{Busybox}, Files: base(Busybox), Config: shell},
		{Refs: []string{GlibcDNS}, Files: withDNSTools(base(GlibcDNS), p), Config: shell},
		{
			Refs:  []string{Nginx, NginxNew},
			Files: base(Nginx, imagebuild.File{Path: "/usr/sbin/nginx", Mode: 0o755, Data: p.Critest.Webserver}),
			Config: imagebuild.Config{
				Env: []string{images.DefaultPath}, Cmd: []string{"nginx", "-g", "daemon off;"},
				ExposedPorts: []string{"80/tcp"},
			},
		},
		{Refs: []string{NonRoot}, Files: base(NonRoot), Config: nonroot},
		{
			Refs: []string{NoNewPrivs},
			Files: base(NoNewPrivs, imagebuild.File{
				Path: "/usr/local/bin/nnp", Mode: os.ModeSetuid | os.ModeSetgid | 0o755, Data: p.Critest.NNP,
			}),
			Config: imagebuild.Config{Env: []string{images.DefaultPath}, Cmd: []string{"nnp"}},
		},
		{
			Refs: []string{Pause},
			Files: append(slices.Clone(pause.Files()),
				imagebuild.File{Path: "/etc/kube-e2e-image", Mode: 0o644, Data: []byte(Pause + "\n")}),
			Config: pause.Config(),
		},
	}
	if len(p.CoreDNS) > 0 {
		imgs = append(imgs, coreDNS(p))
	}
	return imgs, nil
}

// coreDNS is upstream's image as far as a pod sees it: /coredns alone
// (upstream's is distroless), run as root to bind port 53.
func coreDNS(p Programs) critest.Image {
	ref := CoreDNSImage(p.CoreDNSVersion)
	return critest.Image{
		Refs: []string{ref},
		Files: []imagebuild.File{
			{Path: "/coredns", Mode: 0o755, Data: p.CoreDNS},
			{Path: "/etc", Mode: os.ModeDir | 0o755},
			{Path: "/tmp", Mode: os.ModeDir | 0o1777},
			{Path: "/etc/kube-e2e-image", Mode: 0o644, Data: []byte(ref + "\n")},
		},
		Config: imagebuild.Config{Entrypoint: []string{"/coredns"}, ExposedPorts: []string{"53/tcp", "53/udp"}},
	}
}

// withProgram puts an executable at file in place of what is there and of
// any busybox applet of the same name elsewhere, so that the name means
// this program whatever the order of PATH.
func withProgram(files []imagebuild.File, file string, data []byte) []imagebuild.File {
	out := slices.DeleteFunc(slices.Clone(files), func(f imagebuild.File) bool {
		return f.Path == file || f.Hardlink == "/bin/busybox" && path.Base(f.Path) == path.Base(file)
	})
	return append(out, imagebuild.File{Path: file, Mode: 0o755, Data: data})
}

// withDNSTools adds the DNS specs' dig and getent, which both agnhost and
// glibc-dns-testing have upstream.
func withDNSTools(files []imagebuild.File, p Programs) []imagebuild.File {
	out := withProgram(files, "/usr/bin/dig", p.Critest.Dig)
	return withProgram(out, "/usr/bin/getent", p.Critest.Getent)
}

// agnhostFiles adds agnhost and what its Dockerfile adds to busybox's files.
func agnhostFiles(files []imagebuild.File, p Programs) []imagebuild.File {
	out := critest.WithUserInGroup(files, "user-defined-in-image", 1000, "group-defined-in-image", 50000)
	out = withProgram(out, "/bin/bash", p.Bash)
	out = withProgram(out, "/bin/nc", p.Critest.Nc) // busybox's applet is there
	out = withDNSTools(out, p)
	return append(out,
		imagebuild.File{Path: "/agnhost", Mode: 0o755, Data: p.Agnhost},
		imagebuild.File{Path: "/usr/bin/curl", Mode: 0o755, Data: p.Critest.Curl},
		imagebuild.File{Path: "/agnhost-2", Link: "agnhost"},
		imagebuild.File{Path: "/uploads", Mode: os.ModeDir | 0o755},
		imagebuild.File{Path: "/localhost.crt", Mode: 0o644, Data: p.PorterCert},
		imagebuild.File{Path: "/localhost.key", Mode: 0o600, Data: p.PorterKey},
	)
}
