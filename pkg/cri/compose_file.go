package cri

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/compose-spec/compose-go/v2/types"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// projectFileMu guards project folders; creatingProjects (under it) names
// the projects whose RunPodSandbox is in flight, so that the sweep of
// folders without a pod leaves them alone.
var (
	projectFileMu    sync.Mutex
	creatingProjects = map[string]bool{}
)

// writeProject renders a pod's compose file from the store and replaces the
// old one atomically, so `docker compose` (v2, and v1 run in that folder)
// always reads a whole file naming every service.
func (s *Server) writeProject(sandboxID string) error {
	sb, err := s.store.Sandbox(sandboxID)
	if err != nil {
		return err
	}
	services := []types.ServiceConfig{*sb.Service}
	// Oldest first: a service's newest attempt is the one the file keeps.
	ctrs := s.store.ContainersOf(sb.ID)
	for i := len(ctrs) - 1; i >= 0; i-- {
		services = append(services, *ctrs[i].ServiceCfg)
	}
	network := ""
	if sb.Service.NetworkMode != "host" {
		network = s.cfg.Network
	}
	b, err := sandbox.ComposeYAML(sandbox.Project(sb.Project, network, services...))
	if err != nil {
		return err
	}
	h := s.hostInfo()
	path := h.ComposeFile(sb.Project)
	projectFileMu.Lock()
	defer projectFileMu.Unlock()
	if err := s.writeResolvConf(sb.Project, sb.Config); err != nil {
		return err
	}
	if err := s.access.MkdirAll(filepath.Dir(path)); err != nil {
		return fmt.Errorf("project folder of %s: %w", sb.Project, err)
	}
	// It holds every environment value of the pod: root's and the socket
	// group's only (state_dir.go).
	if err := s.access.WriteFile(path, b, s.access.File()); err != nil {
		return fmt.Errorf("write compose file of %s: %w", sb.Project, err)
	}
	return nil
}

// writeResolvConf keeps the resolv.conf a pod's DNS config asks for in its
// project folder, where its containers bind-mount it from.
func (s *Server) writeResolvConf(project string, cfg *runtime.PodSandboxConfig) error {
	b := sandbox.ResolvConf(cfg.GetDnsConfig())
	if b == nil {
		return nil
	}
	path := s.hostInfo().ResolvConfPath(project)
	if err := s.access.MkdirAll(filepath.Dir(path)); err != nil {
		return fmt.Errorf("resolv.conf of %s: %w", project, err)
	}
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	// Written in place: a running container's bind mount keeps the inode.
	if err := os.WriteFile(path, b, resolvConfMode); err != nil {
		return fmt.Errorf("resolv.conf of %s: %w", project, err)
	}
	return nil
}

// removeProject deletes a pod's project folder.
func (s *Server) removeProject(project string) error {
	if project == "" {
		return nil
	}
	if err := os.RemoveAll(s.hostInfo().ProjectDir(project)); err != nil {
		return fmt.Errorf("remove project folder of %s: %w", project, err)
	}
	return nil
}
