package store

import (
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestApplyState(t *testing.T) {
	const (
		unknown = runtime.ContainerState_CONTAINER_UNKNOWN
		created = runtime.ContainerState_CONTAINER_CREATED
		running = runtime.ContainerState_CONTAINER_RUNNING
	)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	ts := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	ns := func(d time.Duration) int64 { return t0.Add(d).UnixNano() }
	createdAt := ns(-time.Minute)
	const never = "0001-01-01T00:00:00Z" // the engine's unset time
	for _, tc := range []struct {
		name string
		in   *container.State
		want ContainerStatus
	}{
		{"no state", nil, ContainerStatus{State: unknown}},
		{"created", &container.State{Status: container.StateCreated, StartedAt: never, FinishedAt: never},
			ContainerStatus{State: created}},
		{"start failed", &container.State{Status: container.StateCreated, Error: "exec: no such file", StartedAt: never, FinishedAt: never},
			ContainerStatus{State: exited, Reason: "StartError", Message: "exec: no such file", ExitCode: 128, FinishedAt: createdAt}},
		{"start failed with its own exit code and time", &container.State{Status: container.StateCreated, Error: "oci: permission denied",
			ExitCode: 126, StartedAt: never, FinishedAt: ts(0)},
			ContainerStatus{State: exited, Reason: "StartError", Message: "oci: permission denied", ExitCode: 126, FinishedAt: ns(0)}},
		{"running", &container.State{Status: container.StateRunning, Running: true, Pid: 42, StartedAt: ts(0), FinishedAt: never},
			ContainerStatus{State: running, Pid: 42, StartedAt: ns(0)}},
		{"running again: the last exit is not reported", &container.State{Status: container.StateRunning, Running: true, Pid: 43,
			StartedAt: ts(time.Second), FinishedAt: ts(0)},
			ContainerStatus{State: running, Pid: 43, StartedAt: ns(time.Second)}},
		{"paused is running", &container.State{Status: container.StatePaused, Running: true, Paused: true, Pid: 42, StartedAt: ts(0), FinishedAt: never},
			ContainerStatus{State: running, Pid: 42, StartedAt: ns(0)}},
		{"restarting is running", &container.State{Status: container.StateRestarting, Restarting: true, StartedAt: ts(0), FinishedAt: ts(time.Second)},
			ContainerStatus{State: running, StartedAt: ns(0)}},
		{"completed", &container.State{Status: container.StateExited, StartedAt: ts(0), FinishedAt: ts(time.Second)},
			ContainerStatus{State: exited, Reason: "Completed", StartedAt: ns(0), FinishedAt: ns(time.Second)}},
		{"failed", &container.State{Status: container.StateExited, ExitCode: 3, StartedAt: ts(0), FinishedAt: ts(time.Second)},
			ContainerStatus{State: exited, Reason: "Error", ExitCode: 3, StartedAt: ns(0), FinishedAt: ns(time.Second)}},
		{"OOM killed", &container.State{Status: container.StateExited, OOMKilled: true, ExitCode: 137, StartedAt: ts(0), FinishedAt: ts(time.Second)},
			ContainerStatus{State: exited, Reason: "OOMKilled", ExitCode: 137, StartedAt: ns(0), FinishedAt: ns(time.Second)}},
		{"OOM killed with exit 0", &container.State{Status: container.StateExited, OOMKilled: true, StartedAt: ts(0), FinishedAt: ts(time.Second)},
			ContainerStatus{State: exited, Reason: "OOMKilled", StartedAt: ns(0), FinishedAt: ns(time.Second)}},
		{"dead", &container.State{Status: container.StateDead, Dead: true, ExitCode: 1, Error: "driver failed", StartedAt: ts(0), FinishedAt: ts(time.Second)},
			ContainerStatus{State: exited, Reason: "Error", Message: "driver failed", ExitCode: 1, StartedAt: ns(0), FinishedAt: ns(time.Second)}},
		{"removing", &container.State{Status: container.StateRemoving, StartedAt: ts(0), FinishedAt: ts(time.Second)},
			ContainerStatus{State: exited, Reason: "Completed", StartedAt: ns(0), FinishedAt: ns(time.Second)}},
		{"finished before it started: clamped to the start", &container.State{Status: container.StateExited, StartedAt: ts(time.Second), FinishedAt: ts(0)},
			ContainerStatus{State: exited, Reason: "Completed", StartedAt: ns(time.Second), FinishedAt: ns(time.Second)}},
		{"unknown engine status", &container.State{Status: "weird", Pid: 7, StartedAt: ts(0), FinishedAt: never},
			ContainerStatus{State: unknown, Pid: 7, StartedAt: ns(0)}},
	} {
		if got := applyState(tc.in, createdAt); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestSandboxState(t *testing.T) {
	if got := sandboxState(nil); got.State != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("no state: %v", got.State)
	}
	if got := sandboxState(&container.State{Status: container.StateExited, Pid: 0}); got.State != runtime.PodSandboxState_SANDBOX_NOTREADY {
		t.Errorf("exited: %v", got.State)
	}
	got := sandboxState(&container.State{Status: container.StateRunning, Running: true, Pid: 9})
	if got.State != runtime.PodSandboxState_SANDBOX_READY || got.Pid != 9 {
		t.Errorf("running: %+v", got)
	}
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]int64{
		"":                               0,
		"0001-01-01T00:00:00Z":           0,
		"garbage":                        0,
		"1970-01-01T00:00:01.5Z":         1_500_000_000,
		"2025-03-01T12:00:00.000000001Z": time.Date(2025, 3, 1, 12, 0, 0, 1, time.UTC).UnixNano(),
	} {
		if got := parseTime(in); got != want {
			t.Errorf("parseTime(%q) = %d, want %d", in, got, want)
		}
	}
}
