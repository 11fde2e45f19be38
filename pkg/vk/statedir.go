package vk

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
)

// The state dir holds every pod's volumes (secrets and tokens among them),
// logs and the serving key. Like kubelet's root, pods and pod-logs folders
// (0750, owned by root), it is closed to other users of the host: the
// runtime, which runs as root, binds the volumes into containers, and a
// bind mount does not need its source's parent folders to be open to the
// container's user.
const privateDirPerm = 0o750

// PrepareStateDir makes the state dir and its pods and logs folders, and
// closes them to other users when an earlier vk-cri made them open (it
// made them 0755).
func PrepareStateDir(dir string) error {
	for _, p := range []string{dir, filepath.Join(dir, "pods"), filepath.Join(dir, "logs")} {
		if err := closedDir(p, privateDirPerm); err != nil {
			return err
		}
	}
	return nil
}

// closedDir makes folder p with perm, or takes from an existing one the
// permission bits perm has not (a folder made tighter stays so).
func closedDir(p string, perm os.FileMode) error {
	if err := os.MkdirAll(p, perm); err != nil {
		return err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if m := fi.Mode().Perm(); m&^perm != 0 {
		if err := os.Chmod(p, m&perm); err != nil {
			return fmt.Errorf("close %s to other users: %w", p, err)
		}
		klog.V(2).InfoS("Closed a folder to other users", "path", p, "was", m, "now", m&perm)
	}
	return nil
}
