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

// cdiSpec is a CDI spec file of a harmless device: the host's /dev/null
// as a device node, and an environment variable.
const cdiSpec = `cdiVersion: "0.6.0"
kind: "vendor.example/marker"
devices:
  - name: one
    containerEdits:
      deviceNodes:
        - path: /dev/cdi-marker
          hostPath: /dev/null
      env:
        - CDI_MARKER=one
`

// TestCDIOnCurrentEngine: a container that asks for a CDI device by name
// (CRI CDIDevices) gets what the device's spec file says, as the engine
// resolves it from its CDI spec dir: the device node and the variable.
// The compose file names the device as Compose does.
func TestCDIOnCurrentEngine(t *testing.T) {
	if v := os.Getenv(EnvCurrent); v == "" || v == "0" {
		t.Skipf("set %s=1 to build and run a current Docker Engine (make test-engine-current)", EnvCurrent)
	}
	specDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(specDir, "marker.yaml"), []byte(cdiSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	pe := privengine.Start(t, privengine.Options{Current: true,
		Args: func(*privengine.Engine) []string { return []string{"--cdi-spec-dir", specDir} }})
	eng := suite.NewEngine(t, pe.Host())
	const image = "localhost/cri-compose/busybox:engine-current-cdi"
	images.NeedBusybox(t, eng.Client, image)
	d := suite.NewDaemon(t, suite.DaemonConfig{DockerHost: pe.Host(), NetworkSubnet: pe.Subnet(), ReadyTimeout: 2 * time.Minute})
	d.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	ns := "engines-cdi-" + suite.RunID()
	t.Cleanup(func() { eng.Sweep(ns, "") })
	podCfg := &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: "pod", Namespace: ns, Uid: "uid-cdi-" + suite.RunID()},
		LogDirectory: filepath.Join(d.LogDir, ns),
	}
	sb, err := d.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, d.LogTail(30))
	}
	const dev = "vendor.example/marker=one"
	cr, err := d.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{
		PodSandboxId: sb.GetPodSandboxId(), SandboxConfig: podCfg,
		Config: &runtime.ContainerConfig{
			Metadata:   &runtime.ContainerMetadata{Name: "app"},
			Image:      &runtime.ImageSpec{Image: image},
			Command:    []string{"sh", "-c", `echo "CDI_MARKER=$CDI_MARKER" >/tmp/cdi-marker; exec sleep 3600`},
			CDIDevices: []*runtime.CDIDevice{{Name: dev}},
		},
	})
	if err != nil {
		t.Fatalf("CreateContainer with CDI device %s: %v\n%s", dev, err, d.LogTail(30))
	}
	id := cr.GetContainerId()
	if _, err := d.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("StartContainer: %v\n%s", err, d.LogTail(30))
	}
	ex, err := d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: id, Timeout: 30,
		// The main process wrote the variable down: the engine applies CDI
		// edits to the container's OCI spec, not to its config, which an
		// exec takes its environment from.
		Cmd: []string{"sh", "-c", `test -c /dev/cdi-marker && echo "node $(cat /tmp/cdi-marker)"`}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ex.GetStdout()); got != "node CDI_MARKER=one\n" {
		t.Errorf("in the container: %q (stderr %q, exit %d), want the device's node and CDI_MARKER=one", got, ex.GetStderr(), ex.GetExitCode())
	}
	folders := d.ProjectFolders()
	if len(folders) != 1 {
		t.Fatalf("project folders %v, want the pod's alone", folders)
	}
	compose, err := os.ReadFile(filepath.Join(d.StateDir, "projects", folders[0], "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "source: "+dev) || !strings.Contains(string(compose), "target: "+dev) {
		t.Errorf("the compose file does not name the CDI device as Compose does:\n%s", compose)
	}

	// A name no spec file has: the engine refuses it, at create or at
	// start, and the error names it.
	const absent = "vendor.example/marker=absent"
	cr, err = d.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{
		PodSandboxId: sb.GetPodSandboxId(), SandboxConfig: podCfg,
		Config: &runtime.ContainerConfig{
			Metadata:   &runtime.ContainerMetadata{Name: "absent"},
			Image:      &runtime.ImageSpec{Image: image},
			Command:    []string{"sleep", "3600"},
			CDIDevices: []*runtime.CDIDevice{{Name: absent}},
		},
	})
	if err == nil {
		_, err = d.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: cr.GetContainerId()})
	}
	if err == nil || !strings.Contains(err.Error(), absent) {
		t.Errorf("a container with CDI device %s, which no spec has: %v, want an error naming it", absent, err)
	}
}
