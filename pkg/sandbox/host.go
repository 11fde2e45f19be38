package sandbox

import (
	"path/filepath"

	"github.com/moby/moby/api/types/container"
)

// Host is what the mapping needs to know about the node: the runtime's
// settings and the host's real limits, gathered
// once by pkg/cri.
type Host struct {
	Network    string // bridge network every pod joins
	InfraImage string // image of the infra (pause) container
	StateDir   string // cri-compose's state dir; projects live below it

	// Capabilities is the host's capability bounding set ("CAP_CHOWN", …);
	// nil means unknown, and nothing is clamped.
	Capabilities []string
	// FullPrivileged says the engine can really run --privileged here;
	// otherwise privileged is emulated with the capabilities the host has.
	FullPrivileged bool
	// NegativeOOMScoreAdj says runc may set a negative oom_score_adj here
	// (needs CAP_SYS_RESOURCE in the bounding set).
	NegativeOOMScoreAdj bool
	// AppArmor says the host has AppArmor enabled.
	AppArmor bool
	// RecursiveReadOnly says the engine makes a read-only bind mount
	// read-only all the way down when asked (Engine API 1.44+,
	// BindOptions.ReadOnlyForceRecursive); before, runc makes only the
	// top mount read-only and the mounts below it stay writable.
	RecursiveReadOnly bool
	// CDI says the engine injects Container Device Interface devices
	// (a DeviceRequest with the "cdi" driver, Engine API 1.44+ with CDI
	// enabled: on by default from Docker 28.2, a "cdi" feature before).
	CDI bool
	// StageMounts says the engine does not share this machine's filesystem
	// (a remote engine): host-path mounts come from staged copies
	// (ContainerInput.Staged, stage.go) and resolv.conf from the engine's
	// DNS settings rather than a bind of the file cri-compose writes.
	StageMounts bool
	// PodCgroupRoot is the cgroup (a cgroupfs path) below which
	// cri-compose makes the cgroups of pods that ask for pod-level
	// resources (PodCgroup); "" when it cannot, PodCgroupsWhyNot saying why.
	PodCgroupRoot    string
	PodCgroupsWhyNot string

	// LogConfig is the engine log driver for CRI containers: the pump
	// resumes from it after a restart, so it must support reading.
	LogConfig container.LogConfig
}

// ProjectDir is the working directory of a project's compose file.
func (h Host) ProjectDir(project string) string {
	return filepath.Join(h.StateDir, "projects", project)
}

// ComposeFile is the path of a project's compose file.
func (h Host) ComposeFile(project string) string {
	return filepath.Join(h.ProjectDir(project), "compose.yaml")
}

// ResolvConfPath is where a pod's resolv.conf is kept when its config asks
// for DNS settings (see ResolvConf).
func (h Host) ResolvConfPath(project string) string {
	return filepath.Join(h.ProjectDir(project), "resolv.conf")
}
