package remote

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// agentAuth: no identity file, the key in a real ssh-agent
// ($SSH_AUTH_SOCK): the tunnel logs in with it.
func agentAuth(t *testing.T, h *host) {
	for _, bin := range []string{"ssh-agent", "ssh-add"} {
		if _, err := exec.LookPath(bin); err != nil {
			images.SkipOrFail(t, "no %s (openssh-client): %v", bin, err)
		}
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = agent.Process.Kill(); _ = agent.Wait() }()
	suite.Eventually(t, "ssh-agent to listen", 10*time.Second, func() (bool, string) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	add := exec.Command("ssh-add", h.identity)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v\n%s", err, out)
	}
	t.Setenv("SSH_AUTH_SOCK", sock)
	t.Setenv("HOME", t.TempDir()) // no ~/.ssh/id_* to fall back on
	c, err := dockerapi.New(h.sshURL, dockerapi.WithEndpoint(dockerapi.Endpoint{SSH: dockerapi.SSHConfig{KnownHostsFile: h.knownHost}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("ping with the agent's key: %v", err)
	}
}
