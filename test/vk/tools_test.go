package vk_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The control plane (kube-apiserver and etcd) is built from the Go module
// proxy by the module in tools/ and cached by version under the user's
// cache dir, so only the first run on a machine pays for it (several
// minutes: kube-apiserver is big).

func toolCacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "cri-compose", "tools")
	return dir, os.MkdirAll(dir, 0o755)
}

// goCmd runs the go command in dir (outside any workspace) and returns its
// trimmed stdout.
func goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// cachedTool returns the cached binary name-version, building it with
// `go build [flags] -o … pkg` in module dir when it is missing. built says
// how long the build took (0: it was cached).
func cachedTool(ctx context.Context, dir, name, version, pkg string, flags ...string) (path string, built time.Duration, err error) {
	cache, err := toolCacheDir()
	if err != nil {
		return "", 0, err
	}
	path = filepath.Join(cache, name+"-"+version)
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return path, 0, nil
	}
	tmp, err := os.CreateTemp(cache, "."+name+"-build-*")
	if err != nil {
		return "", 0, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	start := time.Now()
	args := append([]string{"build"}, flags...)
	args = append(args, "-o", tmp.Name(), pkg)
	if _, err := goCmd(ctx, dir, args...); err != nil {
		return "", 0, fmt.Errorf("build %s %s: %w", name, version, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", 0, err
	}
	return path, time.Since(start), nil
}

// controlPlaneBinaries returns kube-apiserver and etcd at the versions
// tools/go.mod pins.
func controlPlaneBinaries(ctx context.Context, toolsDir string) (apiserver, etcd string, took time.Duration, err error) {
	kv, err := goCmd(ctx, toolsDir, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	if err != nil {
		return "", "", 0, err
	}
	ev, err := goCmd(ctx, toolsDir, "list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3")
	if err != nil {
		return "", "", 0, err
	}
	apiserver, t1, err := cachedTool(ctx, toolsDir, "kube-apiserver", kv, "k8s.io/kubernetes/cmd/kube-apiserver", "-trimpath", k8sLdflags(kv))
	if err != nil {
		return "", "", 0, err
	}
	etcd, t2, err := cachedTool(ctx, toolsDir, "etcd", ev, "./etcd", "-trimpath", "-ldflags=-s -w")
	if err != nil {
		return "", "", 0, err
	}
	return apiserver, etcd, t1 + t2, nil
}

// kubectlBinary returns kubectl at the Kubernetes version tools/go.mod pins
// (the API server's), for `make demo`.
func kubectlBinary(ctx context.Context, toolsDir string) (string, time.Duration, error) {
	kv, err := goCmd(ctx, toolsDir, "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	if err != nil {
		return "", 0, err
	}
	return cachedTool(ctx, toolsDir, "kubectl", kv, "k8s.io/kubernetes/cmd/kubectl", "-trimpath", k8sLdflags(kv))
}

// k8sLdflags sets the version that a binary of k8s.io/kubernetes at kv
// reports (otherwise v0.0.0-master).
func k8sLdflags(kv string) string {
	minor := strings.SplitN(strings.TrimPrefix(kv, "v"), ".", 3)
	return "-ldflags=-s -w -X k8s.io/component-base/version.gitVersion=" + kv +
		" -X k8s.io/component-base/version.gitMajor=" + minor[0] +
		" -X k8s.io/component-base/version.gitMinor=" + minor[1] +
		" -X k8s.io/component-base/version.gitTreeState=clean"
}

// metricsServerBinary returns metrics-server at the version tools/go.mod
// pins, for `kubectl top`.
func metricsServerBinary(ctx context.Context, toolsDir string) (string, time.Duration, error) {
	v, err := goCmd(ctx, toolsDir, "list", "-m", "-f", "{{.Version}}", "sigs.k8s.io/metrics-server")
	if err != nil {
		return "", 0, err
	}
	return cachedTool(ctx, toolsDir, "metrics-server", v, "sigs.k8s.io/metrics-server/cmd/metrics-server", "-trimpath", "-ldflags=-s -w")
}
