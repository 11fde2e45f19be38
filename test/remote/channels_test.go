package remote

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// manyStreams: cri-compose keeps a follow-logs stream open per running
// container and the event stream, each a channel of the one SSH
// connection; sshd must not cap them (MaxSessions counts sessions, not
// forwarded channels). 40 streams at once, then a call still answers.
func manyStreams(t *testing.T, h *host) {
	eng := suite.NewEngine(t, h.pe.Host())
	images.NeedBusybox(t, eng.Client, image)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := eng.ContainerCreate(ctx, "remote-streams-"+suite.RunID(),
		&container.Config{Image: image, Cmd: []string{"sh", "-c", "while true; do echo tick; sleep 0.2; done"}},
		&container.HostConfig{NetworkMode: "none"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.ContainerRemove(context.WithoutCancel(ctx), id)
	if err := eng.ContainerStart(ctx, id); err != nil {
		t.Fatal(err)
	}
	c, err := dockerapi.New(h.sshURL, dockerapi.WithEndpoint(dockerapi.Endpoint{SSH: dockerapi.SSHConfig{KnownHostsFile: h.knownHost, IdentityFiles: []string{h.identity}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 40
	var streams []io.ReadCloser
	defer func() {
		for _, s := range streams {
			s.Close()
		}
	}()
	for i := range n {
		s, err := c.ContainerLogs(ctx, id, time.Time{}, true)
		if err != nil {
			t.Fatalf("stream %d of %d over one SSH connection: %v", i+1, n, err)
		}
		streams = append(streams, s)
	}
	for i, s := range streams {
		b := make([]byte, 1)
		if _, err := io.ReadFull(s, b); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("ping with %d streams open: %v", n, err)
	}
}
