package cri_test

// Path traversal and label injection through the real server:
// names, labels and paths from requests never make the server write
// outside its state dir or the pod's log directory, and never override
// the labels that say where it writes. pkg/sandbox's fuzz targets cover
// the mapping itself with arbitrary requests.

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

func TestHostileNamesStayInside(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	outside := t.TempDir() // nothing may appear here
	pod := e.podConfig("hostile")
	pod.Metadata.Name = "../../../../" + outside + "/" + pod.Metadata.Name
	pod.Metadata.Namespace = ".."
	pod.Hostname = "h"
	pod.DnsConfig = &runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"../../x"}}
	podID := e.runPod(pod)
	project := sandbox.ProjectName(pod.GetMetadata())

	cfg := ctrConfig("../../../"+outside+"/ctr", "echo hello from inside")
	cfg.LogPath = "app.log"
	cfg.Labels = map[string]string{
		sandbox.LabelLogPath:    filepath.Join(outside, "stolen.log"), // where the pump would write, as root
		sandbox.LabelType:       sandbox.TypeSandbox,
		sandbox.LabelProject:    "other-project",
		sandbox.LabelWorkingDir: outside,
		sandbox.LabelSandboxID:  "0000",
		"app":                   "ok",
	}
	id := e.runCtr(podID, pod, cfg)
	e.waitCtrState(id, runtime.ContainerState_CONTAINER_EXITED, 30*time.Second)

	// A container with no log path of its own: only the label would
	// name one.
	quiet := ctrConfig("quiet", "echo hello from quiet")
	quiet.LogPath = ""
	quiet.Labels = map[string]string{sandbox.LabelLogPath: filepath.Join(outside, "stolen-quiet.log")}
	quietID := e.runCtr(podID, pod, quiet)
	e.waitCtrState(quietID, runtime.ContainerState_CONTAINER_EXITED, 30*time.Second)
	if p := e.ctrStatus(quietID).GetLogPath(); p != "" {
		t.Errorf("a container without log_path has the log path %q", p)
	}

	want := filepath.Join(pod.GetLogDirectory(), "app.log")
	st := e.ctrStatus(id)
	if st.GetLogPath() != want {
		t.Errorf("log path %q, want %q", st.GetLogPath(), want)
	}
	if b, err := os.ReadFile(want); err != nil || !strings.Contains(string(b), "hello from inside") {
		t.Errorf("log %s: %v %q", want, err, b)
	}
	if got := st.GetLabels()["app"]; got != "ok" {
		t.Errorf("the request's own label: %q", got)
	}
	list := e.engineCtrs(sandbox.LabelProject + "=" + project)
	if len(list) != 3 {
		t.Fatalf("engine holds %d containers of project %s, want 3", len(list), project)
	}
	for _, c := range list {
		if c.Labels[sandbox.LabelWorkingDir] != e.projectDir(project) {
			t.Errorf("%s: working dir label %q, want %q", c.Names, c.Labels[sandbox.LabelWorkingDir], e.projectDir(project))
		}
		if c.ID == quietID && c.Labels[sandbox.LabelLogPath] != "" {
			t.Errorf("the request's %s label reached the engine: %q", sandbox.LabelLogPath, c.Labels[sandbox.LabelLogPath])
		}
		if c.ID == id && (c.Labels[sandbox.LabelLogPath] != want || c.Labels[sandbox.LabelType] != sandbox.TypeContainer || c.Labels[sandbox.LabelSandboxID] != podID) {
			t.Errorf("container labels overridden by the request: %v", c.Labels)
		}
	}
	if ctrs := e.listCtrs(&runtime.ContainerFilter{PodSandboxId: podID}); len(ctrs) != 2 {
		t.Errorf("the pod lists %v", ctrs)
	}
	if pods := e.listPods(&runtime.PodSandboxFilter{Id: id}); len(pods) != 0 {
		t.Errorf("the container is listed as a pod: %v", pods)
	}

	// Every file the server wrote is in the project's folder; nothing
	// appeared outside.
	_ = filepath.WalkDir(e.stateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if r, _ := filepath.Rel(e.projectDir(project), p); strings.HasPrefix(r, "..") {
			t.Errorf("file %s outside the project's folder %s", p, e.projectDir(project))
		}
		return nil
	})
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("files appeared in %s: %v", outside, entries)
	}

	// And the log path itself may not leave the log directory.
	bad := ctrConfig("escape", "true")
	bad.LogPath = "../" + filepath.Base(outside) + "/x.log"
	_, err := e.rt().CreateContainer(e.ctx(), &runtime.CreateContainerRequest{PodSandboxId: podID, Config: bad, SandboxConfig: pod})
	wantCode(t, err, codes.InvalidArgument, "log_path")
}
