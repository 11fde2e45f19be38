// Command install-compose installs Docker Compose v2 as the docker CLI
// plugin, so that `docker compose ls/ps/logs` show cri-compose's pods on a
// host whose distribution has only Compose v1 (Debian 12's docker-compose
// is 1.29, which lists a project only from its own folder). It builds the
// Compose version the test suites use, once, into the tool cache, and
// puts it (a hard link or a copy, which outlive a cleaned cache) into the
// plugin folder:
// by default /usr/local/lib/docker/cli-plugins for root, which every
// user's docker CLI searches, and the user's own
// ($DOCKER_CONFIG/cli-plugins or ~/.docker/cli-plugins) otherwise.
//
//	go run ./test/toolcache/install-compose [-dir DIR]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cri-compose/cri-compose/test/toolcache"
)

func main() {
	dir := flag.String("dir", defaultDir(), "folder of the docker CLI plugins to install docker-compose into")
	flag.Parse()
	if err := install(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "install-compose:", err)
		os.Exit(1)
	}
}

func defaultDir() string {
	if os.Geteuid() == 0 {
		return "/usr/local/lib/docker/cli-plugins"
	}
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "cli-plugins")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".docker", "cli-plugins")
}

func install(dir string) error {
	if dir == "" {
		return errors.New("no plugin folder: give -dir")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	fmt.Println("Docker Compose v2 from the tool cache (built the first time only, which takes minutes)...")
	bin, took, err := toolcache.Compose(ctx, root)
	if err != nil {
		return err
	}
	if took > 0 {
		fmt.Printf("built in %s\n", took.Round(time.Second))
	}
	dst, err := toolcache.PlaceComposePlugin(bin, dir)
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "docker", "compose", "version").CombinedOutput()
	switch {
	case err == nil:
		fmt.Printf("installed %s: %s", dst, out)
	case dir == defaultDir():
		return fmt.Errorf("installed %s, but `docker compose version` fails: %w: %s", dst, err, out)
	default:
		fmt.Printf("installed %s; the docker CLI does not search %s (it does $DOCKER_CONFIG/cli-plugins and the system's plugin folders)\n", dst, dir)
	}
	return nil
}

// repoRoot is the checkout's root: the folder of the go.mod above the
// working directory that holds test/tools (where Compose's version is
// pinned).
func repoRoot() (string, error) {
	out, err := exec.Command(toolcache.GoBin(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run it from a cri-compose checkout")
	}
	root := filepath.Dir(mod)
	if _, err := os.Stat(filepath.Join(root, "test", "tools", "go.mod")); err != nil {
		return "", fmt.Errorf("run it from a cri-compose checkout: %w", err)
	}
	return root, nil
}
