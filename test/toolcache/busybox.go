package toolcache

import (
	"archive/tar"
	"bytes"
	"compress/bzip2"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// BusyboxVersion is the upstream BusyBox that Busybox builds: the version
// of Docker Hub's busybox image that Kubernetes' e2e busybox image
// (registry.k8s.io/e2e-test-images/busybox:1.37.0-2) mirrors.
const BusyboxVersion = "1.37.0"

// busyboxSHA256 pins the release tarball. Debian's archive serves the same
// file as the package's orig tarball.
const busyboxSHA256 = "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4"

// busyboxURLs are tried in order.
var busyboxURLs = []string{
	"https://busybox.net/downloads/busybox-" + BusyboxVersion + ".tar.bz2",
	"https://deb.debian.org/debian/pool/main/b/busybox/busybox_" + BusyboxVersion + ".orig.tar.bz2",
}

// Busybox returns upstream BusyBox at BusyboxVersion, built static with
// its defconfig as Docker Hub's image is, from the tool cache (a first
// build takes about two minutes of two cores, with gcc and make).
//
// Debian's busybox-static is not a faithful stand-in for it: Debian
// reverts upstream's ash change that keeps environment variables whose
// names are not shell identifiers (such as "data-1") and passes them on to
// the programs the shell runs, and e2e specs read such variables through
// `sh -c env`.
func Busybox(ctx context.Context) (path string, built time.Duration, err error) {
	cache, err := Dir()
	if err != nil {
		return "", 0, fmt.Errorf("tool cache: %w", err)
	}
	path = filepath.Join(cache, "busybox-"+BusyboxVersion)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		return path, 0, nil
	}
	start := time.Now()
	work, err := os.MkdirTemp(cache, ".busybox-build-*")
	if err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(work)
	tarball, err := fetchBusybox(ctx)
	if err != nil {
		return "", 0, err
	}
	src := filepath.Join(work, "busybox-"+BusyboxVersion)
	if err := untarBzip2(tarball, work); err != nil {
		return "", 0, fmt.Errorf("busybox: unpack: %w", err)
	}
	if err := runIn(ctx, src, "make", "defconfig"); err != nil {
		return "", 0, err
	}
	if err := editConfig(filepath.Join(src, ".config"), map[string]string{
		"CONFIG_STATIC": "y",
		// tc's CBQ code no longer builds against Linux 6.8+ headers, which
		// dropped CBQ; no spec runs tc.
		"CONFIG_TC": "",
	}); err != nil {
		return "", 0, err
	}
	if err := runIn(ctx, src, "make", fmt.Sprintf("-j%d", runtime.NumCPU()), "busybox"); err != nil {
		return "", 0, err
	}
	bin := filepath.Join(src, "busybox")
	if err := runIn(ctx, src, bin, "--list"); err != nil {
		return "", 0, err
	}
	if err := os.Rename(bin, path); err != nil {
		return "", 0, err
	}
	return path, time.Since(start), nil
}

// fetchBusybox downloads the release tarball and checks its digest.
func fetchBusybox(ctx context.Context) ([]byte, error) {
	var errs []error
	for _, url := range busyboxURLs {
		b, err := fetch(ctx, url)
		if err == nil {
			sum := sha256.Sum256(b)
			if got := hex.EncodeToString(sum[:]); got != busyboxSHA256 {
				err = fmt.Errorf("sha256 %s, want %s", got, busyboxSHA256)
			}
		}
		if err == nil {
			return b, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", url, err))
	}
	return nil, fmt.Errorf("busybox %s: no source: %w", BusyboxVersion, errors.Join(errs...))
}

func fetch(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// untarBzip2 unpacks regular files, folders and symlinks of a .tar.bz2
// into dir.
func untarBzip2(b []byte, dir string) error {
	tr := tar.NewReader(bzip2.NewReader(bytes.NewReader(b)))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("%q leaves the folder", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				err = os.Symlink(h.Linkname, p)
			}
		case tar.TypeReg:
			err = writeFile(p, tr, os.FileMode(h.Mode)&0o777)
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// editConfig sets kconfig symbols in a .config: "y" or a value sets one,
// "" unsets it.
func editConfig(path string, set map[string]string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	for i, l := range lines {
		for sym, v := range set {
			if l != "# "+sym+" is not set" && !strings.HasPrefix(l, sym+"=") {
				continue
			}
			lines[i] = "# " + sym + " is not set"
			if v != "" {
				lines[i] = sym + "=" + v
			}
		}
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}

// runIn runs a build step in dir; its output is returned only on failure.
func runIn(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 4000 {
			out = out[len(out)-4000:]
		}
		return fmt.Errorf("busybox build: %s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
