package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// dynamicBusybox returns the path of Debian's dynamically linked busybox
// (package busybox), the images' sh (see critest.Shell). It cannot be
// installed beside busybox-static, which provides /bin/busybox too, so its
// package is fetched with `apt-get download` (after `apt-get update` when
// that fails), unpacked with dpkg-deb and its binary cached in
// os.UserCacheDir()/cri-compose/tools/busybox-deb.
func dynamicBusybox(ctx context.Context) (string, error) {
	dir := toolCacheDir()
	bin := filepath.Join(dir, "busybox-deb")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("no %s to fetch Debian's busybox", tool)
		}
	}
	tmp, err := os.MkdirTemp("", "busybox-deb-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", cmd, err, bytes.TrimSpace(out.Bytes()))
		}
		return nil
	}
	logf("shell: fetching Debian's busybox package (once; cached in %s)", bin)
	if err := run("apt-get", "download", "-qq", "busybox"); err != nil {
		if err := run("apt-get", "update", "-qq"); err != nil {
			return "", err
		}
		if err := run("apt-get", "download", "-qq", "busybox"); err != nil {
			return "", err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "busybox_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download busybox left %d packages", len(debs))
	}
	if err := run("dpkg-deb", "-x", debs[0], "root"); err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(tmp, "root", "bin", "busybox"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	part, err := os.CreateTemp(dir, ".busybox-deb-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(part.Name())
	_, err = part.Write(data)
	if cerr := part.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(part.Name(), 0o755)
	}
	if err != nil {
		return "", err
	}
	return bin, os.Rename(part.Name(), bin)
}
