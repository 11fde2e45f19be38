package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// tool is a binary built from the module test/conformance/tools and cached
// in os.UserCacheDir()/cri-compose/tools/<name>-<version>.
type tool struct {
	name   string // "critest"
	module string // module whose version names the binary
	build  []string
}

var (
	critestTool = tool{
		name:   "critest",
		module: "sigs.k8s.io/cri-tools",
		build:  []string{"test", "-c", "-o", "{out}", "sigs.k8s.io/cri-tools/cmd/critest"},
	}
	ginkgoTool = tool{
		name:   "ginkgo",
		module: "github.com/onsi/ginkgo/v2",
		build:  []string{"build", "-o", "{out}", "github.com/onsi/ginkgo/v2/ginkgo"},
	}
)

// ensure returns the path of t's binary, building it first unless the cache
// has it. toolsDir is the tools module's folder.
func (t tool) ensure(ctx context.Context, goCmd, toolsDir string) (string, error) {
	version, err := moduleVersion(filepath.Join(toolsDir, "go.mod"), t.module)
	if err != nil {
		return "", err
	}
	dir := toolCacheDir()
	bin := filepath.Join(dir, t.name+"-"+version)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		logf("%s %s: cached, %s", t.name, version, bin)
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Build beside the target and rename, so that a concurrent or
	// interrupted run never sees half a binary.
	tmp, err := os.CreateTemp(dir, "."+t.name+"-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := make([]string, len(t.build))
	for i, a := range t.build {
		args[i] = strings.ReplaceAll(a, "{out}", tmp.Name())
	}
	logf("%s %s: building (go %s, once; later runs reuse it)", t.name, version, strings.Join(args, " "))
	start := time.Now()
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = toolsDir
	cmd.Env = append(os.Environ(), "GOWORK=off") // the tools module stands alone
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w\n%s", t.name, err, out.Bytes())
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", err
	}
	logf("%s %s: built in %s, %s", t.name, version, time.Since(start).Round(time.Second), bin)
	return bin, nil
}

// toolCacheDir is os.UserCacheDir()/cri-compose/tools, shared with
// test/e2e's tools; without a user cache dir (no HOME) a folder of the temp
// dir.
func toolCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "cri-compose", "tools")
}

// moduleVersion reads the version of module mod required by the go.mod at
// path.
func moduleVersion(path, mod string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == mod && strings.HasPrefix(fields[1], "v") {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s does not require %s", path, mod)
}
