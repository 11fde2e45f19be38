package cri

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/cri/perm"
)

// The state dir and the CRI log files are closed to other users: a compose
// file holds every environment value of its pod, a log whatever the pod's
// programs print. Only root and the socket's group (Config.SocketGroup,
// which can drive the runtime anyway) may read them: package perm.

// resolvConfMode is the mode of a pod's resolv.conf: its containers read it
// through a bind mount as whatever user they run as. The folder above it
// keeps it from anyone else on the host, and it holds no secret (name
// servers, search domains, options).
const resolvConfMode fs.FileMode = 0o644

// fileAccess is who may read what the server writes on this host: root, and
// the socket group when one is configured and exists. A group that cannot
// be found leaves root alone (the socket's Listen refuses it anyway).
func fileAccess(group string) perm.Access {
	if group == "" {
		return perm.Owner()
	}
	gid, err := lookupGroup(group)
	if err != nil {
		klog.ErrorS(err, "Socket group not found; the state dir and logs are root's only", "group", group)
		return perm.Owner()
	}
	return perm.Group(gid)
}

// secureStateDir makes the state dir if it is missing, and gives what is in
// it the modes this server writes with: older versions left folders 0755
// and compose files 0644, readable by every local user. Nothing is moved or
// removed, so every pod stays. Copies of images for image volumes keep the
// image's own modes below their (closed) folder: containers read them as
// their own users.
func (s *Server) secureStateDir() error {
	a, root := s.access, s.cfg.StateDir
	if err := a.MkdirAll(root); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	imageVolumes := s.files.VolumesDir()
	var errs []error
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			errs = append(errs, err)
			return nil
		}
		mode := a.File()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			return nil
		case d.IsDir() && filepath.Dir(filepath.Dir(p)) == imageVolumes:
			return fs.SkipDir // image-volumes/<id>/rootfs: the image's own modes
		case d.IsDir():
			mode = a.Dir()
		case d.Name() == "resolv.conf":
			mode = resolvConfMode
		}
		if err := a.Set(p, mode); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}
