package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// counterScript prints "line 1" … "line 5" at once, then one more numbered
// line every 100ms, and exits 0 on SIGTERM.
const counterScript = `trap 'exit 0' TERM
i=0
while [ $i -lt 5 ]; do i=$((i+1)); echo "line $i"; done
while true; do sleep 0.1; i=$((i+1)); echo "line $i"; done`

// TestPodLife drives one pod through its whole life with crictl: pulls
// (direct and through a mirror), runp/create/start, the CRI log file, status
// and logs; checks that Compose v2 and v1 see the pod as a project; restarts
// cri-compose under it (SIGTERM, then SIGKILL) and checks that the pod, its
// container and its log file come through intact; then tears it down and
// checks that nothing is left.
func TestPodLife(t *testing.T) {
	d := newDaemon(t, "life")
	t.Cleanup(func() { t.Logf("crictl transcript:\n%s", d.transcript.String()) })

	// Images: from the test registry, then through the mirror.
	d.crictl("pull", regImage)
	var imgs imageList
	d.crictlJSON(&imgs, "images")
	if !imgs.has(regImage) {
		t.Fatalf("crictl images does not list %s after the pull: %v", regImage, imgs.tags())
	}
	d.note("lists %s", regImage)
	d.crictl("pull", mirrorImage)
	d.crictlJSON(&imgs, "images")
	if !imgs.has(mirrorImage) {
		t.Fatalf("crictl images does not list %s after the pull through the mirror: %v", mirrorImage, imgs.tags())
	}
	mirrorName := reg.Host + "/" + strings.TrimPrefix(mirrorImage, "registry.k8s.io/")
	if imgs.has(mirrorName) {
		t.Errorf("crictl images lists the mirror's name %s too; only the requested name should stay", mirrorName)
	}
	d.note("lists %s (pulled from the mirror %s), not the mirror's name", mirrorImage, mirrorName)
	d.crictl("images")

	// The pod and its container.
	podPath := d.writeJSON("pod.json", d.podConfig("life"))
	pod := strings.TrimSpace(d.crictl("runp", podPath))
	ctrPath := d.writeJSON("ctr.json", map[string]any{
		"metadata": map[string]any{"name": "counter"},
		"image":    map[string]any{"image": regImage},
		"command":  []string{"sh", "-c", counterScript},
		"log_path": "counter.log",
		"linux":    map[string]any{},
	})
	ctr := strings.TrimSpace(d.crictl("create", pod, ctrPath, podPath))
	d.crictl("start", ctr)

	logPath := filepath.Join(d.logDir, "counter.log")
	suite.Eventually(t, "lines 1-5 in the CRI log file", 30*time.Second, func() (bool, string) {
		recs, err := readCRILog(logPath)
		if err != nil {
			return false, err.Error()
		}
		ns := lineNumbers(recs)
		return len(ns) >= 5 && checkSequence(ns) == nil, tailRecords(recs)
	})
	recs, err := readCRILog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[:5] {
		if r.Stream != "stdout" || r.Tag != "F" {
			t.Errorf("record %+v: want stream stdout and tag F", r)
		}
	}
	d.note("the CRI log file %s begins:", logPath)
	d.transcript.WriteString(indent(rawHead(logPath, 5)))

	d.crictl("ps")
	var ctrs containerList
	d.crictlJSON(&ctrs, "ps", "--pod", pod)
	if len(ctrs.Containers) != 1 || ctrs.Containers[0].ID != ctr || ctrs.Containers[0].State != "CONTAINER_RUNNING" {
		t.Errorf("crictl ps --pod %s: want only %s running, got %+v", pod, ctr, ctrs.Containers)
	}
	var ci containerInspect
	d.crictlJSON(&ci, "inspect", ctr)
	if ci.Status.State != "CONTAINER_RUNNING" {
		t.Errorf("crictl inspect: state %s, want CONTAINER_RUNNING", ci.Status.State)
	}
	if ci.Status.LogPath != logPath {
		t.Errorf("crictl inspect: logPath %q, want %q", ci.Status.LogPath, logPath)
	}
	d.note("state %s, logPath %s, project %s, service %s", ci.Status.State, ci.Status.LogPath, ci.Info.Project, ci.Info.Service)
	var pi podInspect
	d.crictlJSON(&pi, "inspectp", pod)
	if pi.Status.State != "SANDBOX_READY" || pi.Status.Network.IP == "" {
		t.Errorf("crictl inspectp: state %s, ip %q; want SANDBOX_READY with an IP", pi.Status.State, pi.Status.Network.IP)
	}
	project := pi.Info.Project
	d.note("state %s, ip %s, project %s", pi.Status.State, pi.Status.Network.IP, project)
	if project == "" {
		t.Fatalf("crictl inspectp names no Compose project in its info")
	}
	projectDir := filepath.Join(d.stateDir, "projects", project)
	if _, err := os.Stat(filepath.Join(projectDir, "compose.yaml")); err != nil {
		t.Errorf("project %s has no compose file: %v", project, err)
	}
	if logs := d.crictl("logs", ctr); !strings.Contains(logs, "line 1\nline 2\nline 3\nline 4\nline 5\n") {
		t.Errorf("crictl logs %s lacks lines 1-5:\n%s", ctr, logs)
	}

	// Compose sees the pod as a project.
	t.Run("compose-v2", func(t *testing.T) { checkComposeV2(t, d, project, "counter", "line 3") })
	t.Run("compose-v1", func(t *testing.T) { checkComposeV1(t, d, project, projectDir) })

	// Restarts under a running pod.
	before := d.snapshot(t, pod)
	d.note("before the restarts:")
	d.transcript.WriteString(indent(before))
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL"}[sig]
		t.Logf("restarting cri-compose after %s", name)
		fmt.Fprintf(&d.transcript, "# cri-compose stopped by %s; for 1s the container writes on; cri-compose started again on the same state dir and socket\n", name)
		d.stop(sig)
		down, _ := engineLog(t, ctr)
		time.Sleep(time.Second) // lines written now are caught up after the start
		d.start()
		after := d.snapshot(t, pod)
		if after != before {
			t.Errorf("after a restart (%s) crictl lists\n%s\nwant, as before it,\n%s", name, after, before)
		}
		d.note("after the restart, as before it:")
		d.transcript.WriteString(indent(after))
		// The pump catches up with everything the engine has.
		stdout, _ := engineLog(t, ctr)
		want := len(stdout)
		if want-len(down) < 5 {
			t.Errorf("the container wrote only %d lines while cri-compose was down, want 5 or more", want-len(down))
		}
		suite.Eventually(t, "the CRI log to catch up after the restart", 30*time.Second, func() (bool, string) {
			recs, err := readCRILog(logPath)
			if err != nil {
				return false, err.Error()
			}
			ns := lineNumbers(recs)
			if err := checkSequence(ns); err != nil {
				t.Fatalf("after a restart (%s): %v", name, err)
			}
			return len(ns) >= want, tailRecords(recs)
		})
		recs, _ := readCRILog(logPath)
		d.note("%d lines were written while it was down; the CRI log file has lines 1-%d exactly once (the engine had %d when cri-compose was back)",
			want-len(down), len(recs), want)
	}
	d.crictlJSON(&ci, "inspect", ctr)
	if ci.Status.State != "CONTAINER_RUNNING" {
		t.Errorf("after the restarts crictl inspect says %s, want CONTAINER_RUNNING", ci.Status.State)
	}

	// Tear down.
	d.crictl("stop", "--timeout", "10", ctr)
	d.crictlJSON(&ci, "inspect", ctr)
	if ci.Status.State != "CONTAINER_EXITED" || ci.Status.ExitCode != 0 {
		t.Errorf("after crictl stop: state %s exit code %d, want CONTAINER_EXITED 0", ci.Status.State, ci.Status.ExitCode)
	}
	d.note("state %s, exitCode %d, reason %s", ci.Status.State, ci.Status.ExitCode, ci.Status.Reason)
	n := compareWithEngine(t, ctr, logPath)
	d.note("the CRI log file = the engine's log of the container: %d messages, each once, stamped within seconds of the engine", n)
	d.crictl("rm", ctr)
	d.crictl("stopp", pod)
	d.crictl("rmp", pod)
	d.crictl("pods", "--namespace", d.namespace)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left, err := engine.ContainerList(ctx, "com.docker.compose.project="+project)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range left {
		t.Errorf("after rmp the engine still has container %s %v of project %s", c.ID[:12], c.Names, project)
	}
	if _, err := os.Stat(projectDir); !os.IsNotExist(err) {
		t.Errorf("after rmp the project folder %s is still there (%v)", projectDir, err)
	}
	d.note("the engine has no container labelled com.docker.compose.project=%s; %s is gone", project, projectDir)
	if composeV2Err == nil {
		var ls []composeLsEntry
		if err := json.Unmarshal([]byte(docker(t, "", "compose", "ls", "-a", "--format", "json")), &ls); err != nil {
			t.Fatal(err)
		}
		for _, p := range ls {
			if p.Name == project {
				t.Errorf("after rmp docker compose ls -a still lists %+v", p)
			}
		}
		d.note("docker compose ls -a no longer lists %s", project)
	}
}

// compareWithEngine checks, once the container has exited, that its CRI log
// file holds exactly what the engine logged, message for message: nothing
// lost, nothing twice, across the restarts. Records written from the
// attach stream are stamped when they arrived, those read back from the
// engine's log (while cri-compose was down) with the engine's stamp: each
// is within stampSkew of the engine's.
func compareWithEngine(t *testing.T, ctr, logPath string) int {
	t.Helper()
	const stampSkew = 5 * time.Second
	stdout, stderr := engineLog(t, ctr)
	recs, err := readCRILog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		if r.Tag != "F" || r.Stream != "stdout" {
			t.Errorf("unexpected record %+v", r)
		}
		got = append(got, r.Content)
	}
	var want []string
	var stamps []time.Time
	for _, l := range stdout {
		ts, content, _ := strings.Cut(l, " ")
		tm, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("engine log line %q: %v", l, err)
		}
		want = append(want, content)
		stamps = append(stamps, tm)
	}
	if len(stderr) > 0 {
		t.Errorf("the container wrote to stderr: %q", stderr)
	}
	if err := checkSequence(lineNumbers(recs)); err != nil {
		t.Errorf("CRI log: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the CRI log file (%d records) is not the engine's log (%d messages)", len(got), len(want))
		for i := 0; i < max(len(got), len(want)); i++ {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("first difference at %d: CRI %q, engine %q", i, g, w)
				break
			}
		}
		return len(want)
	}
	for i, r := range recs {
		if d := r.Time.Sub(stamps[i]); d > stampSkew || d < -stampSkew {
			t.Errorf("record %d (%q) stamped %v, the engine's message %v", i, r.Content, r.Time, stamps[i])
		}
	}
	return len(want)
}

// TestExitCode: a container that exits 3 is reported exited with exit code
// 3 and reason Error.
func TestExitCode(t *testing.T) {
	d := newDaemon(t, "exit")
	podPath := d.writeJSON("pod.json", d.podConfig("exit"))
	pod := strings.TrimSpace(d.crictl("runp", podPath))
	ctrPath := d.writeJSON("ctr.json", map[string]any{
		"metadata": map[string]any{"name": "fails"},
		"image":    map[string]any{"image": localImage},
		"command":  []string{"sh", "-c", "echo bye; exit 3"},
		"log_path": "fails.log",
		"linux":    map[string]any{},
	})
	ctr := strings.TrimSpace(d.crictl("create", pod, ctrPath, podPath))
	d.crictl("start", ctr)
	var ci containerInspect
	suite.Eventually(t, "the container to exit", 30*time.Second, func() (bool, string) {
		out, err := d.crictlQuiet("inspect", "-o", "json", ctr)
		if err != nil {
			return false, err.Error()
		}
		ci = containerInspect{}
		if err := json.Unmarshal([]byte(out), &ci); err != nil {
			return false, err.Error()
		}
		return ci.Status.State == "CONTAINER_EXITED", out
	})
	if ci.Status.ExitCode != 3 || ci.Status.Reason != "Error" {
		t.Errorf("crictl inspect: exitCode %d reason %q, want 3 and Error", ci.Status.ExitCode, ci.Status.Reason)
	}
	// The pod was made right after cri-compose started, while it was
	// resyncing with the engine: its project folder must have survived that.
	var pi podInspect
	d.crictlJSON(&pi, "inspectp", pod)
	if _, err := os.Stat(pi.Info.ComposeFile); pi.Info.ComposeFile == "" || err != nil {
		t.Errorf("the compose file %q of the pod made during the start-up resync is missing: %v", pi.Info.ComposeFile, err)
	}
	if logs := d.crictl("logs", ctr); logs != "bye\n" {
		t.Errorf("crictl logs: %q, want %q", logs, "bye\n")
	}
	d.crictl("rmp", "--force", pod)
}

// composeLsEntry is one project of `docker compose ls --format json`.
type composeLsEntry struct {
	Name        string
	Status      string
	ConfigFiles string
}

// composePsEntry is one container of `docker compose ps --format json`.
type composePsEntry struct {
	Name    string
	Service string
	State   string
	Project string
}

// checkComposeV2 checks that Compose v2 lists the pod's project as running,
// its services (the infra one, "pod", and service) and the logs.
func checkComposeV2(t *testing.T, d *daemon, project, service, logLine string) {
	if composeV2Err != nil {
		d.note("no docker compose v2: %v", composeV2Err)
		images.SkipOrFail(t, "no docker compose v2: %v", composeV2Err)
	}
	d.transcript.WriteString("$ docker compose ls --format json\n")
	out := docker(t, "", "compose", "ls", "--format", "json")
	var ls []composeLsEntry
	if err := json.Unmarshal([]byte(out), &ls); err != nil {
		t.Fatalf("docker compose ls --format json: %v\n%s", err, out)
	}
	i := slices.IndexFunc(ls, func(e composeLsEntry) bool { return e.Name == project })
	if i < 0 {
		t.Fatalf("docker compose ls does not list %s:\n%s", project, out)
	}
	if !strings.HasPrefix(ls[i].Status, "running") {
		t.Errorf("docker compose ls: %s has status %q, want running", project, ls[i].Status)
	}
	d.note("lists %+v", ls[i])

	d.transcript.WriteString("$ docker compose -p " + project + " ps\n")
	d.transcript.WriteString(indent(docker(t, "", "compose", "-p", project, "ps")))
	out = docker(t, "", "compose", "-p", project, "ps", "--format", "json")
	ps, err := decodeComposePs(out)
	if err != nil {
		t.Fatalf("docker compose ps --format json: %v\n%s", err, out)
	}
	services := map[string]string{}
	for _, c := range ps {
		services[c.Service] = c.State
	}
	for _, s := range []string{"pod", service} {
		if services[s] != "running" {
			t.Errorf("docker compose -p %s ps: service %q is %q, want running (all: %v)", project, s, services[s], services)
		}
	}
	d.note("--format json: services %v", services)

	out = docker(t, "", "compose", "-p", project, "logs", "--no-color", service)
	d.transcript.WriteString("$ docker compose -p " + project + " logs --no-color " + service + "\n")
	d.transcript.WriteString(indent(headLines(out, 3) + "\n…"))
	if !strings.Contains(out, logLine+"\n") {
		t.Errorf("docker compose -p %s logs %s lacks %q:\n%s", project, service, logLine, out)
	}
}

// decodeComposePs reads `docker compose ps --format json`: one object per
// line (v2.21 and later) or one array (earlier).
func decodeComposePs(out string) ([]composePsEntry, error) {
	out = strings.TrimSpace(out)
	var ps []composePsEntry
	if strings.HasPrefix(out, "[") {
		return ps, json.Unmarshal([]byte(out), &ps)
	}
	for _, line := range strings.Split(out, "\n") {
		if line == "" {
			continue
		}
		var e composePsEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, err
		}
		ps = append(ps, e)
	}
	return ps, nil
}

// checkComposeV1 checks that Debian's Compose v1, run in the project folder,
// lists both containers of the pod.
func checkComposeV1(t *testing.T, d *daemon, project, projectDir string) {
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		d.note("no docker-compose (Compose v1) here: not checked")
		t.Skipf("no docker-compose (Compose v1) on this machine: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctrs, err := engine.ContainerList(ctx, "com.docker.compose.project="+project)
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs) != 2 {
		t.Fatalf("the engine has %d containers of project %s, want 2", len(ctrs), project)
	}
	out, err := dockerE(projectDir, bin, "ps")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ctrs {
		name := strings.TrimPrefix(c.Names[0], "/")
		if !strings.Contains(out, name) {
			t.Errorf("docker-compose ps (v1) in %s does not list %s:\n%s", projectDir, name, out)
		}
	}
	d.transcript.WriteString("$ cd " + projectDir + " && docker-compose ps   # Compose v1\n")
	d.transcript.WriteString(indent(out))
}

// tailRecords shows the last records of a log, for wait messages.
func tailRecords(recs []logRecord) string {
	var b strings.Builder
	for _, r := range recs[max(0, len(recs)-3):] {
		b.WriteString(r.Content + "; ")
	}
	return b.String()
}

// rawHead is the first n lines of a file as they are on disk.
func rawHead(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return headLines(string(b), n)
}

// headLines is the first n lines of s.
func headLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// TestTwoRuntimesOneEngine: a second cri-compose on the same engine (its own
// state dir, socket and network) neither lists nor adopts the first one's
// pod: it writes no compose file for it and does not pump its container's
// log, so the first one's CRI log file gets every line exactly once.
func TestTwoRuntimesOneEngine(t *testing.T) {
	a := newDaemon(t, "one")
	podPath := a.writeJSON("pod.json", a.podConfig("one"))
	pod := strings.TrimSpace(a.crictl("runp", podPath))
	ctrPath := a.writeJSON("ctr.json", map[string]any{
		"metadata": map[string]any{"name": "counter"},
		"image":    map[string]any{"image": localImage},
		"command":  []string{"sh", "-c", counterScript},
		"log_path": "counter.log",
	})
	ctr := strings.TrimSpace(a.crictl("create", pod, ctrPath, podPath))
	a.crictl("start", ctr)
	logPath := filepath.Join(a.logDir, "counter.log")
	suite.Eventually(t, "the first lines in the CRI log file", 30*time.Second, func() (bool, string) {
		recs, err := readCRILog(logPath)
		return err == nil && len(recs) >= 5, tailRecords(recs)
	})

	b := newDaemon(t, "two")
	var pods podList
	b.crictlJSON(&pods, "pods")
	for _, p := range pods.Items {
		if p.ID == pod {
			t.Errorf("the second cri-compose lists the first one's pod %s", pod)
		}
	}
	if _, err := b.crictlQuiet("inspect", ctr); err == nil {
		t.Errorf("the second cri-compose knows the first one's container %s", ctr)
	}
	time.Sleep(time.Second) // what B would pump, it pumps now
	entries, _ := os.ReadDir(filepath.Join(b.stateDir, "projects"))
	for _, e := range entries {
		t.Errorf("the second cri-compose has a project folder %s", e.Name())
	}
	b.stop(syscall.SIGTERM)

	a.crictl("stop", "--timeout", "10", ctr)
	compareWithEngine(t, ctr, logPath)
	a.crictl("rmp", "--force", pod)
}
