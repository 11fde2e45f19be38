package vk_test

import (
	"context"
	"strings"
	"time"

	"github.com/cri-compose/cri-compose/test/toolcache"
)

// The control plane (kube-apiserver and etcd) is built from the Go module
// proxy by the module in tools/ and cached by version under the user's
// cache dir, so only the first run on a machine pays for it (several
// minutes: kube-apiserver is big). The cache is test/toolcache's, shared
// with test/e2e and test/bench.

// controlPlaneBinaries returns kube-apiserver and etcd at the versions
// tools/go.mod pins.
func controlPlaneBinaries(ctx context.Context, toolsDir string) (apiserver, etcd string, took time.Duration, err error) {
	kv, err := toolcache.ModuleVersion(ctx, toolsDir, "k8s.io/kubernetes")
	if err != nil {
		return "", "", 0, err
	}
	ev, err := toolcache.ModuleVersion(ctx, toolsDir, "go.etcd.io/etcd/server/v3")
	if err != nil {
		return "", "", 0, err
	}
	apiserver, t1, err := toolcache.Cached(ctx, toolsDir, "kube-apiserver", kv, "k8s.io/kubernetes/cmd/kube-apiserver", "-trimpath", k8sLdflags(kv))
	if err != nil {
		return "", "", 0, err
	}
	etcd, t2, err := toolcache.Cached(ctx, toolsDir, "etcd", ev, "./etcd", "-trimpath", "-ldflags=-s -w")
	if err != nil {
		return "", "", 0, err
	}
	return apiserver, etcd, t1 + t2, nil
}

// kubectlBinary returns kubectl at the Kubernetes version tools/go.mod pins
// (the API server's), for `make demo`.
func kubectlBinary(ctx context.Context, toolsDir string) (string, time.Duration, error) {
	return kubeBinary(ctx, toolsDir, "kubectl", "k8s.io/kubernetes/cmd/kubectl")
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
	v, err := toolcache.ModuleVersion(ctx, toolsDir, "sigs.k8s.io/metrics-server")
	if err != nil {
		return "", 0, err
	}
	return toolcache.Cached(ctx, toolsDir, "metrics-server", v, "sigs.k8s.io/metrics-server/cmd/metrics-server", "-trimpath", "-ldflags=-s -w")
}

// kubeBinary returns the command pkg of k8s.io/kubernetes (for example
// k8s.io/kubernetes/cmd/kube-scheduler) built as name, at the version
// tools/go.mod pins.
func kubeBinary(ctx context.Context, toolsDir, name, pkg string) (string, time.Duration, error) {
	kv, err := toolcache.ModuleVersion(ctx, toolsDir, "k8s.io/kubernetes")
	if err != nil {
		return "", 0, err
	}
	return toolcache.Cached(ctx, toolsDir, name, kv, pkg, "-trimpath", k8sLdflags(kv))
}

// e2eTestBinary returns Kubernetes' e2e suite (e2e.test) at the version
// tools/go.mod pins. It is the biggest build of all: about 10 minutes of
// two cores with a warm build cache, up to half an hour cold.
func e2eTestBinary(ctx context.Context, toolsDir string) (string, time.Duration, error) {
	kv, err := toolcache.ModuleVersion(ctx, toolsDir, "k8s.io/kubernetes")
	if err != nil {
		return "", 0, err
	}
	return toolcache.CachedTest(ctx, toolsDir, "e2e.test", kv, "k8s.io/kubernetes/test/e2e", "-trimpath", k8sLdflags(kv))
}

// agnhostBinary returns Kubernetes' e2e test server agnhost, static (for
// an image without a libc), at the version tools/go.mod pins.
func agnhostBinary(ctx context.Context, toolsDir string) (string, time.Duration, error) {
	kv, err := toolcache.ModuleVersion(ctx, toolsDir, "k8s.io/kubernetes")
	if err != nil {
		return "", 0, err
	}
	return toolcache.CachedEnv(ctx, []string{"CGO_ENABLED=0"}, toolsDir, "agnhost", kv, "k8s.io/kubernetes/test/images/agnhost", "-trimpath", k8sLdflags(kv))
}
