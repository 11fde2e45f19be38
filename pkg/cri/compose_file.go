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

// projectFolders guards the pods' project folders, which RunPodSandbox,
// writeProject and the sweep of folders without a pod all write. Its zero
// value is ready.
type projectFolders struct {
	mu sync.Mutex
	// creating names the projects whose RunPodSandbox is in flight, so
	// that the sweep leaves their new folders alone; read it in locked.
	creating map[string]bool
}

// locked runs f with the folders to itself.
func (p *projectFolders) locked(f func() error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f()
}

// create runs prepare (which makes project's folder) with the folders to
// itself, and keeps project in flight until done is called.
func (p *projectFolders) create(project string, prepare func() error) (done func(), err error) {
	p.mu.Lock()
	if p.creating == nil {
		p.creating = map[string]bool{}
	}
	p.creating[project] = true
	err = prepare()
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.creating, project)
		p.mu.Unlock()
	}, err
}

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
	return s.projects.locked(func() error {
		if err := s.writeResolvConf(sb.Project, sb.Config); err != nil {
			return err
		}
		if err := s.access.MkdirAll(filepath.Dir(path)); err != nil {
			return fmt.Errorf("project folder of %s: %w", sb.Project, err)
		}
		// It holds every environment value of the pod: root's and the
		// socket group's only (state_dir.go).
		if err := s.access.WriteFile(path, b, s.access.File()); err != nil {
			return fmt.Errorf("write compose file of %s: %w", sb.Project, err)
		}
		return nil
	})
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
