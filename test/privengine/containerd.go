package privengine

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cri-compose/cri-compose/test/suite"
)

// The containerd of a current engine (Options.Current), in the engine's
// network namespace, with everything it keeps under dir/containerd.

// containerdDir is the folder of the engine's containerd.
func (e *Engine) containerdDir() string { return filepath.Join(e.dir, "containerd") }

// containerdSock is its gRPC socket, which dockerd's --containerd names.
func (e *Engine) containerdSock() string {
	return filepath.Join(e.containerdDir(), "containerd.sock")
}

// ContainerdLog is the current (or last) run's containerd log
// (Options.Current).
func (e *Engine) ContainerdLog() string {
	b, _ := os.ReadFile(filepath.Join(e.containerdDir(), fmt.Sprintf("containerd.%d.log", e.ctrdStarts)))
	return string(b)
}

// containerdConfig is the config (version 3, as containerd 2 reads it) of
// a containerd whose every path is under dir. Its CRI plugins are off
// (dockerd does not use them), and so is NRI, whose socket would be the
// host's /var/run/nri/nri.sock. The shims' sockets are in
// /run/containerd/s, as containerd has no setting for it; their names hash
// this containerd's address, so none is shared with the machine's.
func containerdConfig(dir, sock string) string {
	q := strconv.Quote
	return `version = 3
root = ` + q(filepath.Join(dir, "root")) + `
state = ` + q(filepath.Join(dir, "state")) + `
temp = ` + q(filepath.Join(dir, "tmp")) + `
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.images",
  "io.containerd.cri.v1.runtime",
  "io.containerd.podsandbox.controller.v1.podsandbox",
  "io.containerd.nri.v1.nri",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs",
]

[grpc]
  address = ` + q(sock) + `
[ttrpc]
  address = ` + q(sock+".ttrpc") + `
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = ` + q(filepath.Join(dir, "opt")) + `
`
}

// startContainerd starts the engine's containerd and waits until its
// socket accepts connections.
func (e *Engine) startContainerd() {
	e.t.Helper()
	dir := e.containerdDir()
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{bin, filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
	for name, target := range map[string]string{"containerd-shim-runc-v2": e.bins.Shim, "runc": e.bins.Runc} {
		link := filepath.Join(bin, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(target, link); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	cfgFile := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgFile, []byte(containerdConfig(dir, e.containerdSock())), 0o644); err != nil {
		e.t.Fatal(err)
	}
	e.ctrdStarts++
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("containerd.%d.log", e.ctrdStarts)))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+e.NetNS(), e.bins.Containerd, "--config", cfgFile, "--log-level", "warn")
	cmd.Env = e.currentEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		e.t.Fatalf("containerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	e.ctrd, e.ctrdExited = cmd, exited
	if err := suite.Poll("the private containerd to accept connections", 30*time.Second, func() (bool, string) {
		c, err := net.DialTimeout("unix", e.containerdSock(), time.Second)
		if err == nil {
			c.Close()
			return true, ""
		}
		select {
		case <-exited:
			e.ctrd = nil
			e.t.Fatalf("private containerd exited at start: %v\n%s", cmd.ProcessState, e.ContainerdLog())
		default:
		}
		return false, err.Error()
	}); err != nil {
		e.t.Fatalf("%v\n%s", err, e.ContainerdLog())
	}
}

// currentEnv is the environment of a current engine's dockerd and
// containerd: PATH starts with dir/containerd/bin, which holds the shim and
// runc under the names containerd and dockerd look for.
func (e *Engine) currentEnv() []string {
	bin := filepath.Join(e.containerdDir(), "bin")
	return append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// stopContainerd ends the engine's containerd (if it runs) with SIGTERM.
func (e *Engine) stopContainerd() {
	if e.ctrd == nil {
		return
	}
	_ = e.ctrd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.ctrdExited:
	case <-time.After(30 * time.Second):
		_ = e.ctrd.Process.Kill()
		<-e.ctrdExited
		e.t.Errorf("private containerd did not stop within 30s of SIGTERM")
	}
	e.ctrd = nil
}
