package cri_test

// cri-compose's own API (proto/cricompose/v1) through its generated client
// on the same socket as CRI, on the real engine: ListProjects, FollowLog
// (since, tail, follow across a rotation) and ExportProject (what the pod's
// mounts become), and the CLI's client side (pkg/projectcli). Running an
// export with `docker compose up` is test/e2e's TestExportRuns.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/pkg/projectcli"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
	"github.com/cri-compose/cri-compose/test/suite"
)

// projects is the client of cri-compose's own API on the current server.
func (e *criEnv) projects() cricomposev1.ProjectsClient {
	return cricomposev1.NewProjectsClient(e.server().Conn)
}

func TestListProjects(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("list")
	podID := e.runPod(pod)
	sleeper := e.runCtr(podID, pod, ctrConfig("sleeper", "exec sleep 600"))
	done := e.runCtr(podID, pod, ctrConfig("done", "exit 4"))
	e.waitCtrState(done, runtime.ContainerState_CONTAINER_EXITED, 20*time.Second)

	resp, err := e.projects().ListProjects(e.ctx(), &cricomposev1.ListProjectsRequest{})
	if err != nil {
		t.Fatalf("ListProjects: %v", err)
	}
	var p *cricomposev1.Project
	for _, x := range resp.GetProjects() {
		if x.GetPodSandboxId() == podID {
			p = x
		}
	}
	if p == nil {
		t.Fatalf("ListProjects does not list the pod %s: %v", podID, resp.GetProjects())
	}
	project := sandbox.ProjectName(pod.GetMetadata())
	md := p.GetMetadata()
	if p.GetName() != project || md.GetName() != pod.GetMetadata().GetName() || md.GetNamespace() != testNamespace ||
		md.GetUid() != pod.GetMetadata().GetUid() || md.GetAttempt() != 0 {
		t.Errorf("project %s metadata %v, want %s and the pod's metadata %v", p.GetName(), md, project, pod.GetMetadata())
	}
	if p.GetState() != cricomposev1.ProjectState_PROJECT_STATE_READY || p.GetCreatedAt() == 0 {
		t.Errorf("state %s created %d, want READY and a time", p.GetState(), p.GetCreatedAt())
	}
	if want := filepath.Join(e.projectDir(project), "compose.yaml"); p.GetComposeFile() != want {
		t.Errorf("compose_file %q, want %q", p.GetComposeFile(), want)
	} else if _, err := os.Stat(want); err != nil {
		t.Errorf("compose_file: %v", err)
	}
	var got []string
	for _, s := range p.GetServices() {
		got = append(got, fmt.Sprintf("%s %.12s %s %s %s exit=%d", s.GetName(), s.GetContainerId(), s.GetContainerName(), s.GetState(), s.GetImage(), s.GetExitCode()))
	}
	want := []string{
		fmt.Sprintf("pod %.12s POD SERVICE_STATE_RUNNING %s exit=0", podID, pause.Ref()),
		fmt.Sprintf("done %.12s done SERVICE_STATE_EXITED %s exit=4", done, testImage),
		fmt.Sprintf("sleeper %.12s sleeper SERVICE_STATE_RUNNING %s exit=0", sleeper, testImage),
	}
	if !slices.Equal(got, want) {
		t.Errorf("services:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The CLI's table.
	var out, errOut bytes.Buffer
	if code := projectcli.RunProjects([]string{"--runtime-endpoint", "unix://" + e.server().Socket}, "", projectcli.IO{Stdout: &out, Stderr: &errOut}); code != 0 {
		t.Fatalf("cri-compose projects: exit %d: %s", code, errOut.String())
	}
	row := ""
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, project+" ") {
			row = l
		}
	}
	for _, w := range []string{testNamespace + "/" + pod.GetMetadata().GetName(), podID[:13], "Ready", "pod (running), done (exited 4), sleeper (running)"} {
		if !strings.Contains(row, w) {
			t.Errorf("cri-compose projects: the row of %s lacks %q:\n%s", project, w, out.String())
		}
	}
	t.Logf("cri-compose projects:\n%s", out.String())
}

// followLog calls FollowLog and returns what it streamed, as logLines does,
// until the stream ends (err is its status, nil at its normal end).
func followLog(ctx context.Context, c cricomposev1.ProjectsClient, req *cricomposev1.FollowLogRequest, each func(string)) ([]string, error) {
	stream, err := c.FollowLog(ctx, req)
	if err != nil {
		return nil, err
	}
	var out []string
	for {
		l, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		tag := "F"
		if l.GetPartial() {
			tag = "P"
		}
		s := fmt.Sprintf("%s %s %s", l.GetStream(), tag, l.GetContent())
		out = append(out, s)
		if each != nil {
			each(s)
		}
	}
}

func TestFollowLog(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	pod := e.podConfig("follow")
	podID := e.runPod(pod)
	trigger := t.TempDir()
	cfg := ctrConfig("counter", `i=0; while [ $i -lt 5 ]; do i=$((i+1)); echo "line $i"; done
while [ ! -e /trigger/go ]; do sleep 0.05; done
echo "line 6"; echo oops >&2
while [ ! -e /trigger/end ]; do sleep 0.05; done
echo "line 7"`)
	cfg.Mounts = []*runtime.Mount{{HostPath: trigger, ContainerPath: "/trigger"}}
	id := e.runCtr(podID, pod, cfg)
	logPath := filepath.Join(pod.GetLogDirectory(), "counter.log")
	suite.Eventually(t, "lines 1-5 in the log file", 20*time.Second, func() (bool, string) {
		l := logLines(readLog(t, logPath))
		return len(l) == 5, fmt.Sprint(l)
	})
	recs := readLog(t, logPath)
	c := e.projects()
	lines := func(from, to int) []string {
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, fmt.Sprintf("stdout F line %d", i))
		}
		return out
	}

	// Since, tail, both, and all, without following.
	for _, tc := range []struct {
		name string
		req  *cricomposev1.FollowLogRequest
		want []string
	}{
		{"all", &cricomposev1.FollowLogRequest{ContainerId: id}, lines(1, 5)},
		{"since", &cricomposev1.FollowLogRequest{ContainerId: id, SinceTime: recs[2].Time.UnixNano()}, lines(3, 5)},
		{"tail", &cricomposev1.FollowLogRequest{ContainerId: id, TailLines: 2}, lines(4, 5)},
		{"since and tail", &cricomposev1.FollowLogRequest{ContainerId: id[:12], SinceTime: recs[1].Time.UnixNano(), TailLines: 1}, lines(5, 5)},
	} {
		got, err := followLog(e.ctx(), c, tc.req, nil)
		if err != nil {
			t.Fatalf("FollowLog %s: %v", tc.name, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("FollowLog %s: %q, want %q", tc.name, got, tc.want)
		}
	}

	// Following: the last two lines, then what the container writes after
	// the call, across kubelet's rotation (rename, ReopenContainerLog),
	// until the container exits.
	type result struct {
		lines []string
		err   error
	}
	seen := make(chan string, 100)
	res := make(chan result, 1)
	ctx, cancel := context.WithTimeout(e.ctx(), time.Minute)
	defer cancel()
	go func() {
		l, err := followLog(ctx, c, &cricomposev1.FollowLogRequest{ContainerId: id, TailLines: 2, Follow: true}, func(s string) { seen <- s })
		res <- result{l, err}
	}()
	for range 2 {
		select {
		case <-seen:
		case <-time.After(20 * time.Second):
			t.Fatal("the follower did not send the tail within 20s")
		}
	}
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt().ReopenContainerLog(e.ctx(), &runtime.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		t.Fatalf("ReopenContainerLog: %v", err)
	}
	if err := os.WriteFile(filepath.Join(trigger, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case s := <-seen:
			t.Logf("followed after the rotation: %s", s)
		case <-time.After(20 * time.Second):
			t.Fatal("the follower did not send line 6 and oops, written after the call and the rotation, within 20s")
		}
	}
	if err := os.WriteFile(filepath.Join(trigger, "end"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end within 30s of the container's exit")
	}
	if r.err != nil {
		t.Fatalf("FollowLog follow: %v", r.err)
	}
	var stdout, stderr []string
	for _, l := range r.lines {
		if strings.HasPrefix(l, "stderr ") {
			stderr = append(stderr, l)
		} else {
			stdout = append(stdout, l)
		}
	}
	if want := []string{"stdout F line 4", "stdout F line 5", "stdout F line 6", "stdout F line 7"}; !slices.Equal(stdout, want) || !slices.Equal(stderr, []string{"stderr F oops"}) {
		t.Errorf("followed %q, want %q and stderr F oops", r.lines, want)
	}
	if st := e.ctrStatus(id); st.GetState() != runtime.ContainerState_CONTAINER_EXITED {
		t.Errorf("the follow ended with the container %s", st.GetState())
	}
	// A follow of an exited container reads what there is and ends.
	got, err := followLog(e.ctx(), c, &cricomposev1.FollowLogRequest{ContainerId: id, Follow: true}, nil)
	if err != nil || len(got) != 3 {
		t.Errorf("follow of the exited container: %q, %v; want line 6, oops, line 7", got, err)
	}

	// Bad input.
	_, err = followLog(e.ctx(), c, &cricomposev1.FollowLogRequest{ContainerId: "0123456789abcdef-no-such-container"}, nil)
	wantCode(t, err, codes.NotFound, "0123456789abcdef-no-such-container")
	noLog := ctrConfig("nolog", "exec sleep 600")
	noLog.LogPath = ""
	noLogID := e.createCtr(podID, pod, noLog)
	_, err = followLog(e.ctx(), c, &cricomposev1.FollowLogRequest{ContainerId: noLogID}, nil)
	wantCode(t, err, codes.FailedPrecondition, "no log path")
}

func TestExportProject(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	host := t.TempDir()
	mk := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(host, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("config.txt", "greeting = hello $USER\n", 0o640)
	mk("site/index.html", "<h1>shop</h1>\n", 0o644)
	mk("site/sub/a.txt", "a\n", 0o600)
	if err := os.Symlink("index.html", filepath.Join(host, "site", "link.html")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(host, "site", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(host, "cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Sockets: one bound on its own, one inside the site folder.
	appSock := filepath.Join(suite.SocketDir(t), "app.sock")
	for _, p := range []string{appSock, filepath.Join(host, "site", "s.sock")} {
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}

	pod := e.podConfig("export")
	port := freePort(t)
	pod.PortMappings = []*runtime.PortMapping{{ContainerPort: 80, HostPort: int32(port), HostIp: "127.0.0.1"}}
	podID := e.runPod(pod)
	web := ctrConfig("web", `echo "price: $PRICE"; exec sleep 600`)
	web.Envs = []*runtime.KeyValue{{Key: "PRICE", Value: []byte("$5")}, {Key: "SITE", Value: []byte("shop")}}
	web.Mounts = []*runtime.Mount{
		{HostPath: filepath.Join(host, "config.txt"), ContainerPath: "/etc/app/config.txt", Readonly: true},
		{HostPath: filepath.Join(host, "site"), ContainerPath: "/srv"},
		{HostPath: filepath.Join(host, "cache"), ContainerPath: "/cache"},
		{HostPath: appSock, ContainerPath: "/run/app.sock"},
	}
	e.runCtr(podID, pod, web)
	helper := ctrConfig("helper", "exec sleep 600")
	helper.Mounts = []*runtime.Mount{{HostPath: filepath.Join(host, "cache"), ContainerPath: "/shared"}}
	e.runCtr(podID, pod, helper)

	resp, err := e.projects().ExportProject(e.ctx(), &cricomposev1.ExportProjectRequest{PodSandboxId: podID[:12]})
	if err != nil {
		t.Fatalf("ExportProject: %v", err)
	}
	if want := sandbox.ExportName(pod.GetMetadata()); resp.GetProjectName() != want {
		t.Errorf("project_name %q, want %q", resp.GetProjectName(), want)
	}
	t.Logf("exported compose.yaml:\n%s", resp.GetComposeYaml())
	files := map[string]*cricomposev1.File{}
	for _, f := range resp.GetFiles() {
		files[f.GetPath()] = f
	}
	check := func(path, content string, mode uint32) {
		t.Helper()
		f := files[path]
		if f == nil {
			t.Errorf("no file %s in %v", path, slices.Sorted(mapKeys(files)))
			return
		}
		if string(f.GetContent()) != content || f.GetMode() != mode {
			t.Errorf("file %s: %q mode %o, want %q mode %o", path, f.GetContent(), f.GetMode(), content, mode)
		}
	}
	// Services by name: helper binds cache first.
	check("volumes/web/0/config.txt", "greeting = hello $USER\n", 0o640)
	check("volumes/web/1/site/index.html", "<h1>shop</h1>\n", 0o644)
	check("volumes/web/1/site/sub/a.txt", "a\n", 0o600)
	check("pause/pause", string(pause.Binary()), 0o755)
	if f := files["volumes/web/1/site/link.html"]; f == nil || f.GetSymlinkTarget() != "index.html" {
		t.Errorf("link.html: %v, want a link to index.html", f)
	}
	if f := files["volumes/web/1/site/empty"]; f == nil || !f.GetDirectory() {
		t.Errorf("empty: %v, want a directory", f)
	}
	if f := files["volumes/web/1/site/s.sock"]; f != nil {
		t.Errorf("the socket in site was shipped: %v", f)
	}
	if f := files["pause/Dockerfile"]; f == nil || !bytes.Contains(f.GetContent(), []byte("FROM scratch")) {
		t.Errorf("pause/Dockerfile: %v", f)
	}
	if ws := resp.GetWarnings(); len(ws) != 2 || !strings.Contains(ws[0], "s.sock (a socket)") ||
		!strings.Contains(ws[1], appSock+":/run/app.sock: a socket cannot be shipped: it still binds the host path") {
		t.Errorf("warnings %q, want one naming the socket left out of site, one the socket still bound", ws)
	}

	// The file, as `docker compose` loads it.
	dir := t.TempDir()
	p, err := loader.LoadWithContext(e.ctx(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml"), Content: resp.GetComposeYaml()}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.ResolvePaths = false })
	if err != nil {
		t.Fatalf("compose-go cannot load the export: %v", err)
	}
	if p.Name != resp.GetProjectName() {
		t.Errorf("the file names the project %q, want %q", p.Name, resp.GetProjectName())
	}
	w := p.Services["web"]
	if w.Image != testImage || !slices.Equal([]string(w.Entrypoint), web.Command) || *w.Environment["PRICE"] != "$5" {
		t.Errorf("web: image %s entrypoint %q PRICE %q", w.Image, w.Entrypoint, *w.Environment["PRICE"])
	}
	var vols []string
	for _, v := range w.Volumes {
		vols = append(vols, v.Type+" "+v.Source+":"+v.Target)
	}
	if want := []string{"bind ./volumes/web/0/config.txt:/etc/app/config.txt", "bind ./volumes/web/1/site:/srv", "volume helper-0:/cache", "bind " + appSock + ":/run/app.sock"}; !slices.Equal(vols, want) {
		t.Errorf("web volumes %q, want %q", vols, want)
	}
	if h := p.Services["helper"]; len(h.Volumes) != 1 || h.Volumes[0].Source != "helper-0" {
		t.Errorf("helper volumes %+v, want helper-0", h.Volumes)
	}
	infra := p.Services[sandbox.InfraService]
	if len(infra.Ports) != 1 || infra.Ports[0].Published != fmt.Sprint(port) || infra.Ports[0].Target != 80 || infra.Build == nil {
		t.Errorf("pod: ports %+v build %+v; want %d->80 and the pause build", infra.Ports, infra.Build, port)
	}
	for name, n := range p.Networks {
		if bool(n.External) {
			t.Errorf("network %s is external", name)
		}
	}
	for _, s := range p.Services {
		for k := range s.Labels {
			if strings.HasPrefix(k, "io.cri-compose.") {
				t.Errorf("service %s keeps label %s", s.Name, k)
			}
		}
	}

	// The CLI writes it out.
	out := filepath.Join(t.TempDir(), "export")
	var stdout, stderr bytes.Buffer
	args := []string{podID, "-o", out, "--runtime-endpoint", "unix://" + e.server().Socket}
	if code := projectcli.RunExport(args, "", projectcli.IO{Stdout: &stdout, Stderr: &stderr}); code != 0 {
		t.Fatalf("cri-compose export: exit %d: %s", code, stderr.String())
	}
	if b, err := os.ReadFile(filepath.Join(out, "volumes/web/0/config.txt")); err != nil || string(b) != "greeting = hello $USER\n" {
		t.Errorf("written config.txt: %q %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(out, "volumes/web/1/site/link.html")); err != nil || l != "index.html" {
		t.Errorf("written link.html: %q %v", l, err)
	}
	if fi, err := os.Stat(filepath.Join(out, "volumes/web/1/site/sub/a.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("written sub/a.txt: %v %v", fi, err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "compose.yaml")); err != nil || !bytes.Equal(b, resp.GetComposeYaml()) {
		t.Errorf("written compose.yaml differs: %v", err)
	}
	if !strings.Contains(stderr.String(), "warning: ") {
		t.Errorf("cri-compose export printed no warning:\n%s", stderr.String())
	}
	// Not into a folder that holds something, unless told to.
	if code := projectcli.RunExport(args, "", projectcli.IO{Stdout: io.Discard, Stderr: &stderr}); code == 0 {
		t.Error("a second export into the same folder succeeded without --force")
	}
	if code := projectcli.RunExport(append(args, "--force"), "", projectcli.IO{Stdout: io.Discard, Stderr: &stderr}); code != 0 {
		t.Errorf("export --force: exit %d: %s", code, stderr.String())
	}
	// By the pod's name too.
	byName := filepath.Join(t.TempDir(), "by-name")
	if code := projectcli.RunExport([]string{testNamespace + "/" + pod.GetMetadata().GetName(), "-o", byName, "--listen", "unix://" + e.server().Socket}, "",
		projectcli.IO{Stdout: io.Discard, Stderr: &stderr}); code != 0 {
		t.Errorf("export by namespace/name: exit %d: %s", code, stderr.String())
	}

	// Bad input.
	_, err = e.projects().ExportProject(e.ctx(), &cricomposev1.ExportProjectRequest{PodSandboxId: "fedcba9876543210-no-such-pod"})
	wantCode(t, err, codes.NotFound, "fedcba9876543210-no-such-pod")
	_, err = e.projects().ExportProject(e.ctx(), &cricomposev1.ExportProjectRequest{})
	wantCode(t, err, codes.InvalidArgument)
	if code := projectcli.RunExport([]string{"no-such-pod", "-o", t.TempDir() + "/x", "--runtime-endpoint", "unix://" + e.server().Socket}, "",
		projectcli.IO{Stdout: io.Discard, Stderr: io.Discard}); code != 1 {
		t.Errorf("export of an unknown pod: exit %d, want 1", code)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// freePort is a TCP port free on 127.0.0.1 just now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
