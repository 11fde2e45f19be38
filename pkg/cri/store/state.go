package store

import (
	"time"

	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	exited          = runtime.ContainerState_CONTAINER_EXITED
	reasonOOMKilled = "OOMKilled"
)

// applyState maps the engine's state of a container created at createdAt
// (Unix nanoseconds) to CRI's.
func applyState(st *container.State, createdAt int64) ContainerStatus {
	r := ContainerStatus{State: runtime.ContainerState_CONTAINER_UNKNOWN}
	if st == nil {
		return r
	}
	r.Pid = st.Pid
	r.StartedAt = parseTime(st.StartedAt)
	r.FinishedAt = parseTime(st.FinishedAt)
	if r.FinishedAt != 0 && r.FinishedAt < r.StartedAt {
		// The engine stamps the start when runc returns and the exit when
		// containerd saw it: a quick process can finish "before" it started.
		r.FinishedAt = r.StartedAt
	}
	r.ExitCode = int32(st.ExitCode)
	switch st.Status {
	case container.StateCreated:
		r.State = runtime.ContainerState_CONTAINER_CREATED
		if st.Error != "" { // the start failed: it will never run
			r.State = exited
			r.Reason, r.Message = "StartError", st.Error
			if r.ExitCode == 0 {
				r.ExitCode = 128
			}
			if r.FinishedAt == 0 {
				r.FinishedAt = createdAt
			}
		}
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		r.State = runtime.ContainerState_CONTAINER_RUNNING
		r.FinishedAt = 0
	case container.StateExited, container.StateDead, container.StateRemoving:
		r.State = exited
		switch {
		case st.OOMKilled:
			r.Reason = reasonOOMKilled
		case st.ExitCode == 0:
			r.Reason = "Completed"
		default:
			r.Reason = "Error"
		}
		r.Message = st.Error
	}
	return r
}

// sandboxState maps the engine's state of an infra container to CRI's.
func sandboxState(st *container.State) SandboxStatus {
	if st != nil && st.Running {
		return SandboxStatus{State: runtime.PodSandboxState_SANDBOX_READY, Pid: st.Pid}
	}
	return SandboxStatus{State: runtime.PodSandboxState_SANDBOX_NOTREADY}
}

// parseTime turns an engine timestamp into Unix nanoseconds (0 for unset).
func parseTime(s string) int64 {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1970 {
		return 0
	}
	return t.UnixNano()
}
