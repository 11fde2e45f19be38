package engines_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/privengine"
	"github.com/cri-compose/cri-compose/test/suite"
)

func TestMain(m *testing.M) { os.Exit(suite.Main(m)) }

// TestPodOnCurrentEngine: cri-compose on a current engine reports
// recursive read-only mounts as supported (the engine's API has them, the
// floor's has not), runs a pod whose container logs a line into its CRI
// log, answers an exec, mounts a folder recursively read-only (a write is
// refused), and removes the pod with nothing left on the engine.
func TestPodOnCurrentEngine(t *testing.T) {
	if v := os.Getenv(EnvCurrent); v == "" || v == "0" {
		t.Skipf("set %s=1 to build and run a current Docker Engine (make test-engine-current)", EnvCurrent)
	}
	pe := privengine.Start(t, privengine.Options{Current: true})
	eng := suite.NewEngine(t, pe.Host())
	const image = "localhost/cri-compose/busybox:engine-current-pod"
	images.NeedBusybox(t, eng.Client, image)
	d := suite.NewDaemon(t, suite.DaemonConfig{DockerHost: pe.Host(), NetworkSubnet: pe.Subnet(), ReadyTimeout: 2 * time.Minute})
	d.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	st, err := d.RT.Status(ctx, &runtime.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rro := false
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == "" {
			rro = h.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	if !rro {
		t.Errorf("the default runtime handler does not report recursive read-only mounts: %v", st.GetRuntimeHandlers())
	}

	ns := "engines-" + suite.RunID()
	t.Cleanup(func() {
		if left := eng.Sweep(ns, ""); len(left) > 0 {
			t.Logf("cleanup removed containers the test left: %v", left)
		}
	})
	podCfg := &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: "pod", Namespace: ns, Uid: "uid-" + suite.RunID()},
		Hostname:     "pod",
		LogDirectory: filepath.Join(d.LogDir, ns),
	}
	sb, err := d.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, d.LogTail(30))
	}
	ro := t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "file"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	const line = "hello from a pod on a current engine"
	cr, err := d.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{
		PodSandboxId: sb.GetPodSandboxId(), SandboxConfig: podCfg,
		Config: &runtime.ContainerConfig{
			Metadata: &runtime.ContainerMetadata{Name: "app"},
			Image:    &runtime.ImageSpec{Image: image},
			Command:  []string{"sh", "-c", "echo '" + line + "'; exec sleep 3600"},
			LogPath:  "app.log",
			Mounts: []*runtime.Mount{{ContainerPath: "/ro", HostPath: ro, Readonly: true, RecursiveReadOnly: true,
				Propagation: runtime.MountPropagation_PROPAGATION_PRIVATE}},
		},
	})
	if err != nil {
		t.Fatalf("CreateContainer with a recursive read-only mount: %v\n%s", err, d.LogTail(30))
	}
	id := cr.GetContainerId()
	if _, err := d.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v\n%s", err, d.LogTail(30))
	}
	logPath := filepath.Join(podCfg.LogDirectory, "app.log")
	suite.Eventually(t, "the container's line in its CRI log", 30*time.Second, func() (bool, string) {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), " stdout F "+line+"\n"), string(b)
	})

	ex, err := d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"cat", "/ro/file"}, Timeout: 30})
	if err != nil || ex.GetExitCode() != 0 || string(ex.GetStdout()) != "kept" {
		t.Errorf("exec cat /ro/file: %v, exit %d, stdout %q, stderr %q", err, ex.GetExitCode(), ex.GetStdout(), ex.GetStderr())
	}
	ex, err = d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Cmd: []string{"touch", "/ro/new"}, Timeout: 30})
	if err != nil {
		t.Fatal(err)
	}
	if ex.GetExitCode() == 0 {
		t.Error("a write into the recursively read-only mount succeeded")
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); !os.IsNotExist(err) {
		t.Errorf("the write reached the host folder: %v", err)
	}

	if _, err := d.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: sb.GetPodSandboxId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: sb.GetPodSandboxId()}); err != nil {
		t.Fatal(err)
	}
	if left := eng.Sweep(ns, ""); len(left) > 0 {
		t.Errorf("the removed pod left containers on the engine: %v", left)
	}
}
