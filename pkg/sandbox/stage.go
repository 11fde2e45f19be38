package sandbox

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/moby/api/types/mount"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Staging: when the engine does not share this machine's
// filesystem (Host.StageMounts), a host-path mount cannot be a bind. The
// caller copies a directory's content into a named volume on the engine
// (StagedVolumeName) and keeps it in sync, and copies a file into the
// container before it starts; the mapping mounts the volume instead of the
// bind, and leaves a copied file out.

// StagedCopy marks, in ContainerInput.Staged, a mount whose content the
// caller copies into the container itself (a file) rather than a volume.
const StagedCopy = "-"

// StagedVolumeName is the volume that holds project's copy of hostPath:
// one per pod and host path, so two containers of a pod that mount the
// same path share it, as they would share the bind.
func StagedVolumeName(project, hostPath string) string {
	sum := sha256.Sum256([]byte(hostPath))
	return project + "_stage-" + hex.EncodeToString(sum[:6])
}

// stagedMount is the mount of m as staged: a volume mount, or nothing for
// a copied file.
func stagedMount(m *runtime.Mount, staged string) (mount.Mount, bool, error) {
	switch staged {
	case "":
		return mount.Mount{}, false, invalid("mount %q of host path %q was not staged on the engine", m.GetContainerPath(), m.GetHostPath())
	case StagedCopy:
		return mount.Mount{}, false, nil
	}
	// Propagation means nothing for a copy: the volume is private to the
	// engine's host.
	return mount.Mount{Type: mount.TypeVolume, Source: staged, Target: m.GetContainerPath(), ReadOnly: m.GetReadonly()}, true, nil
}

// externalVolumes lists the named volumes services mount: staged volumes,
// made by cri-compose before the containers, so external to the project.
func externalVolumes(services []types.ServiceConfig) types.Volumes {
	var out types.Volumes
	for _, s := range services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeVolume || v.Source == "" {
				continue
			}
			if out == nil {
				out = types.Volumes{}
			}
			out[v.Source] = types.VolumeConfig{Name: v.Source, External: true}
		}
	}
	return out
}
