package cri

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// Listen opens the CRI socket: unix:///path (or a bare path). The socket is
// made mode 0660, owned by group when one is named. It refuses to take over
// a socket another process still serves, and replaces a stale one.
func Listen(endpoint, group string) (net.Listener, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if strings.Contains(path, "://") {
		return nil, fmt.Errorf("listen %q: only unix:// endpoints are supported", endpoint)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: another process serves this socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen %s: remove stale socket: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if group != "" {
		gid, err := lookupGroup(group)
		if err == nil {
			err = os.Chown(path, -1, gid)
		}
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("listen %s: socket group %q: %w", path, group, err)
		}
	}
	return l, nil
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(grp.Gid)
}

// Register serves the runtime and image services on g, and cri-compose's
// own API (projects.go) beside them.
func (s *Server) Register(g *grpc.Server) {
	runtime.RegisterRuntimeServiceServer(g, s)
	runtime.RegisterImageServiceServer(g, s.images)
	cricomposev1.RegisterProjectsServer(g, s.Projects())
}
