package toolcache

import (
	"context"
	"path/filepath"
	"strings"
	"time"
)

// The current Docker Engine that test/privengine runs with Options.Current,
// beside (never instead of) the machine's: test/engine/tools/go.mod pins its
// modules.
const (
	MobyModule       = "github.com/moby/moby/v2"
	ContainerdModule = "github.com/containerd/containerd/v2"
	RuncModule       = "github.com/opencontainers/runc"
)

// Build tags of the engine's binaries. Both leave out btrfs support, cgo
// code for a filesystem a private engine never stores on (it uses vfs):
// exclude_graphdriver_btrfs drops moby's btrfs graph driver, no_btrfs
// containerd's btrfs snapshotter, which spares a C compile and the need for
// kernel headers new enough to have linux/btrfs_tree.h.
// nri_no_wasm drops NRI's WebAssembly plugin runtime (moby's release builds
// do the same), netgo and osusergo the cgo name and user lookups of the
// standard library. What cgo remains (moby's disk quota, which needs only
// the kernel headers, and pkcs11, which dlopens) builds with gcc alone.
const (
	dockerdTags    = "-tags=exclude_graphdriver_btrfs nri_no_wasm netgo osusergo"
	containerdTags = "-tags=no_btrfs nri_no_wasm urfave_cli_no_docs netgo osusergo"
	// The shim is built as containerd's Makefile builds it: static, without
	// cgo, and without the gRPC server it does not use (no_grpc).
	shimTags = "-tags=no_btrfs no_grpc urfave_cli_no_docs"
	// runc with seccomp, as Docker's default profile needs: cgo and
	// libseccomp's headers (Debian's libseccomp-dev).
	runcTags = "-tags=seccomp urfave_cli_no_docs"
)

// EngineBinaries are the programs of a current Docker Engine.
type EngineBinaries struct {
	Dockerd, Containerd, Shim, Runc string
	// Proxy is docker-proxy, the userland proxy that publishes ports
	// where the engine may not write iptables rules.
	Proxy string
	// DockerdVersion, ContainerdVersion and RuncVersion are their module
	// versions.
	DockerdVersion, ContainerdVersion, RuncVersion string
}

// CurrentEngine returns dockerd, containerd, containerd-shim-runc-v2 and
// runc at the versions test/engine/tools/go.mod (below repoRoot) requires, from the
// tool cache: a cold build takes many CPU-minutes. built is how long this
// call spent building (0 when all were cached). runc is built too, as
// Debian 12's runc 1.1.5 cannot run Docker 29's containers (it knows no time
// namespace: "runc create failed: namespace {"time" ""} does not exist").
func CurrentEngine(ctx context.Context, repoRoot string) (b EngineBinaries, built time.Duration, err error) {
	dir := filepath.Join(repoRoot, "test", "engine", "tools")
	if b.DockerdVersion, err = ModuleVersion(ctx, dir, MobyModule); err != nil {
		return b, 0, err
	}
	if b.ContainerdVersion, err = ModuleVersion(ctx, dir, ContainerdModule); err != nil {
		return b, 0, err
	}
	if b.RuncVersion, err = ModuleVersion(ctx, dir, RuncModule); err != nil {
		return b, 0, err
	}
	mv, cv := b.DockerdVersion, b.ContainerdVersion
	var took time.Duration
	if b.Dockerd, took, err = Cached(ctx, dir, "dockerd", mv, MobyModule+"/cmd/dockerd", "-trimpath", dockerdTags,
		"-ldflags=-s -w -X "+MobyModule+"/dockerversion.Version="+strings.TrimPrefix(mv, "v")+
			" -X "+MobyModule+"/dockerversion.GitCommit="+mv); err != nil {
		return b, 0, err
	}
	built += took
	if b.Proxy, took, err = CachedEnv(ctx, []string{"CGO_ENABLED=0"}, dir, "docker-proxy", mv, MobyModule+"/cmd/docker-proxy", "-trimpath", "-ldflags=-s -w"); err != nil {
		return b, 0, err
	}
	built += took
	cldflags := "-ldflags=-s -w -X " + ContainerdModule + "/version.Version=" + cv +
		" -X " + ContainerdModule + "/version.Package=" + ContainerdModule
	if b.Containerd, took, err = Cached(ctx, dir, "containerd", cv, ContainerdModule+"/cmd/containerd", "-trimpath", containerdTags, cldflags); err != nil {
		return b, 0, err
	}
	built += took
	if b.Shim, took, err = CachedEnv(ctx, []string{"CGO_ENABLED=0"}, dir, "containerd-shim-runc-v2", cv, ContainerdModule+"/cmd/containerd-shim-runc-v2", "-trimpath", shimTags, cldflags); err != nil {
		return b, 0, err
	}
	built += took
	rv := b.RuncVersion
	if b.Runc, took, err = Cached(ctx, dir, "runc", rv, RuncModule, "-trimpath", runcTags,
		"-ldflags=-s -w -X main.gitCommit="+rv); err != nil {
		return b, 0, err
	}
	built += took
	return b, built, nil
}
