package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// A path starts a one-container pod (an infra container on the pod network
// and a busybox `sleep` joined to its namespaces) its own way. start
// returns once the container runs; undo removes what start made (also after
// a failed start).
type path interface {
	name() string
	start(ctx context.Context, tag string) (undo func(), err error)
}

const (
	pathCRI   = "cri-compose"
	pathFloor = "engine-floor"
	// pathContainerd: the same through containerd's CRI (BenchmarkLogs).
	pathContainerd = "containerd"
	// pathAttach: a CRI log written from the engine's attach stream by a
	// process of its own (BenchmarkLogs).
	pathAttach = "engine-attach"
	// pathAttachNoLog: the same, from a container without an engine log
	// (log driver none): what the attach stream delivers alone.
	pathAttachNoLog = "attach-nolog"
	// pathAttachLocal: the same, from a container whose engine log is the
	// local driver's (protobuf, no JSON).
	pathAttachLocal = "attach-local"
	pathCompose     = "compose-cli"
)

// --- cri-compose: RunPodSandbox + CreateContainer + StartContainer

type criPath struct {
	rt     runtime.RuntimeServiceClient
	ns     string
	logDir string
}

func (p *criPath) name() string { return pathCRI }

func podConfig(ns, tag, logDir string) *runtime.PodSandboxConfig {
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: "p-" + tag, Namespace: ns, Uid: runID + "-" + tag},
		LogDirectory: filepath.Join(logDir, tag),
		Linux:        &runtime.LinuxPodSandboxConfig{},
	}
}

func sleepConfig() *runtime.ContainerConfig {
	return &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "sleep"}, Image: &runtime.ImageSpec{Image: busybox},
		Command: []string{"sleep", "86400"}, LogPath: "sleep.log", Linux: &runtime.LinuxContainerConfig{}}
}

func (p *criPath) start(ctx context.Context, tag string) (func(), error) {
	id, _, err := p.startPod(ctx, tag)
	return func() { p.remove(id) }, err
}

// startPod returns the sandbox's and the container's ids.
func (p *criPath) startPod(ctx context.Context, tag string) (sbID, ctrID string, err error) {
	pc := podConfig(p.ns, tag, p.logDir)
	sb, err := p.rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: pc})
	if err != nil {
		return "", "", fmt.Errorf("RunPodSandbox: %w", err)
	}
	ct, err := p.rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc, Config: sleepConfig()})
	if err != nil {
		return sb.PodSandboxId, "", fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := p.rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: ct.ContainerId}); err != nil {
		return sb.PodSandboxId, ct.ContainerId, fmt.Errorf("StartContainer: %w", err)
	}
	return sb.PodSandboxId, ct.ContainerId, nil
}

func (p *criPath) remove(sbID string) {
	if sbID == "" {
		return
	}
	ctx, cancel := ctxTimeout(2 * time.Minute)
	defer cancel()
	_, _ = p.rt.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: sbID})
	if _, err := p.rt.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: sbID}); err != nil {
		fmt.Fprintf(os.Stderr, "[bench] RemovePodSandbox %.12s: %v\n", sbID, err)
	}
}

// --- the floor: the same engine calls, made directly

type floorPath struct {
	d       *dockerapi.Client
	network string
	ns      string
}

func (p *floorPath) name() string { return pathFloor }

func (p *floorPath) start(ctx context.Context, tag string) (func(), error) {
	var ids []string
	undo := func() {
		ctx, cancel := ctxTimeout(2 * time.Minute)
		defer cancel()
		for i := len(ids) - 1; i >= 0; i-- {
			_ = p.d.ContainerRemove(ctx, ids[i])
		}
	}
	name := fmt.Sprintf("ccb-%s-floor-%s", runID, tag)
	labels := map[string]string{sandbox.LabelPodNamespace: p.ns}
	infra, err := p.d.ContainerCreate(ctx, name+"-pod",
		&container.Config{Image: pause.Ref(), Labels: labels},
		&container.HostConfig{NetworkMode: container.NetworkMode(p.network), IpcMode: "shareable", LogConfig: container.LogConfig{Type: "none"}},
		&network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{p.network: {}}})
	if err != nil {
		return undo, err
	}
	ids = append(ids, infra)
	if err := p.d.ContainerStart(ctx, infra); err != nil {
		return undo, err
	}
	join := container.NetworkMode("container:" + infra)
	app, err := p.d.ContainerCreate(ctx, name+"-sleep",
		&container.Config{Image: busybox, Cmd: []string{"sleep", "86400"}, Labels: labels},
		&container.HostConfig{NetworkMode: join, IpcMode: container.IpcMode(join), PidMode: container.PidMode(join),
			LogConfig: container.LogConfig{Type: "local"}}, nil)
	if err != nil {
		return undo, err
	}
	ids = append(ids, app)
	return undo, p.d.ContainerStart(ctx, app)
}

// --- the compose CLI: `docker compose up -d` of the same pod's compose file

type composePath struct {
	d    *dockerapi.Client
	cmd  []string
	env  []string
	file string
}

func (p *composePath) name() string { return pathCompose }

// project is the compose project name of the pod tag.
func (p *composePath) project(tag string) string { return fmt.Sprintf("ccb-%s-cli-%s", runID, tag) }

func (p *composePath) start(ctx context.Context, tag string) (func(), error) {
	project := p.project(tag)
	undo := func() {
		ctx, cancel := ctxTimeout(2 * time.Minute)
		defer cancel()
		list, err := p.d.ContainerList(ctx, sandbox.LabelProject+"="+project)
		if err != nil {
			return
		}
		var ids []string
		for _, c := range list {
			ids = append(ids, c.ID)
		}
		removeAll(ctx, p.d, ids)
	}
	args := append(append([]string{}, p.cmd...), "-p", project, "-f", p.file, "up", "-d")
	return undo, run(ctx, p.env, args...)
}

// check makes sure the project of tag runs two containers (the infra
// container and busybox), as the cri-compose pod does.
func (p *composePath) check(ctx context.Context, tag string) error {
	project := p.project(tag)
	list, err := p.d.ContainerList(ctx, sandbox.LabelProject+"="+project)
	if err != nil {
		return err
	}
	running := 0
	for _, c := range list {
		if c.State == container.StateRunning {
			running++
		}
	}
	if running != 2 {
		return fmt.Errorf("%s up -d: project %s runs %d containers of %d, want 2", strings.Join(p.cmd, " "), project, running, len(list))
	}
	return nil
}

// exportComposeFile copies the compose file cri-compose keeps for a running
// pod (<state>/projects/<project>/compose.yaml) to the run's folder, for
// the compose CLI to start copies of that pod. It runs standalone as it
// is: its network is the run's (external, and there), its containers get
// their names from the project name the CLI is given, and it carries no
// io.cri-compose.* label, so cri-compose ignores what the CLI starts.
func exportComposeFile(state string, pc *runtime.PodSandboxConfig) (string, error) {
	h := sandbox.Host{StateDir: state}
	b, err := os.ReadFile(h.ComposeFile(sandbox.ProjectName(pc.GetMetadata())))
	if err != nil {
		return "", fmt.Errorf("compose file of a cri-compose pod: %w", err)
	}
	if !strings.Contains(string(b), "external: true") || !strings.Contains(string(b), "network_mode: service:") {
		return "", fmt.Errorf("compose file of a cri-compose pod is not the expected shape:\n%s", b)
	}
	dir := filepath.Join(runDir, "compose")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "compose.yaml")
	return out, os.WriteFile(out, b, 0o644)
}
