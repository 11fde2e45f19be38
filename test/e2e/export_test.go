package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// webScript serves /srv on port 8080 and prints its greeting.
const webScript = `echo "greeting=$GREETING"; exec httpd -f -p 8080 -h /srv`

// TestExportRuns: a pod made with crictl (a web server on a published port,
// an environment with '$' in it, a memory limit, a file and a folder bound
// from the host, an empty folder shared by two containers) is exported with
// `cri-compose export` and run by `docker compose up -d` under a fresh
// project name, in a fresh folder, after the pod was stopped (it publishes
// the same port). The export runs the same images, commands, environment,
// limits and published ports; the host's files arrive with their content
// and are served on the published port; the emptyDir is shared.
func TestExportRuns(t *testing.T) {
	d := newDaemon(t, "export")
	t.Cleanup(func() { t.Logf("transcript:\n%s", d.transcript.String()) })
	if composeV2Err != nil {
		images.SkipOrFail(t, "no docker compose v2: %v", composeV2Err)
	}

	// What the host holds for the pod.
	host := filepath.Join(d.dir, "host")
	conf := "greeting = hello $USER\nprice = 5\n"
	index := "<h1>exported shop</h1>\n"
	for rel, content := range map[string]string{"app.conf": conf, "site/index.html": index, "site/docs/a.txt": "a\n"} {
		p := filepath.Join(host, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{"shared", "cache"} {
		if err := os.MkdirAll(filepath.Join(host, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	port := freeTCPPort(t)
	podCfg := d.podConfig("shop")
	podCfg["port_mappings"] = []map[string]any{{"container_port": 8080, "host_port": port, "host_ip": "127.0.0.1"}}
	podPath := d.writeJSON("pod.json", podCfg)
	pod := strings.TrimSpace(d.crictl("runp", podPath))
	webPath := d.writeJSON("web.json", map[string]any{
		"metadata": map[string]any{"name": "web"},
		"image":    map[string]any{"image": localImage},
		"command":  []string{"sh", "-c", webScript},
		"envs":     []map[string]any{{"key": "GREETING", "value": "hello $USER"}, {"key": "SHOP", "value": "exported"}},
		"log_path": "web.log",
		"mounts": []map[string]any{
			{"container_path": "/etc/app/app.conf", "host_path": filepath.Join(host, "app.conf"), "readonly": true},
			{"container_path": "/srv", "host_path": filepath.Join(host, "site")},
			{"container_path": "/shared", "host_path": filepath.Join(host, "shared")},
			{"container_path": "/cache", "host_path": filepath.Join(host, "cache")},
		},
		"linux": map[string]any{"resources": map[string]any{"memory_limit_in_bytes": 64 << 20}},
	})
	web := strings.TrimSpace(d.crictl("create", pod, webPath, podPath))
	d.crictl("start", web)
	writerPath := d.writeJSON("writer.json", map[string]any{
		"metadata": map[string]any{"name": "writer"},
		"image":    map[string]any{"image": localImage},
		"command":  []string{"sh", "-c", "echo from-writer > /data/note; exec sleep 3600"},
		"log_path": "writer.log",
		"mounts": []map[string]any{
			{"container_path": "/data", "host_path": filepath.Join(host, "shared")},
			{"container_path": "/cache", "host_path": filepath.Join(host, "cache")},
		},
	})
	writer := strings.TrimSpace(d.crictl("create", pod, writerPath, podPath))
	d.crictl("start", writer)
	url := fmt.Sprintf("http://127.0.0.1:%d/index.html", port)
	suite.Eventually(t, "the pod to serve "+url, 30*time.Second, func() (bool, string) {
		body, err := httpGet(url)
		return err == nil && body == index, fmt.Sprint(body, err)
	})
	d.note("GET %s serves the host's site/index.html", url)

	// The CLI lists it, and exports it. The writer has written into the
	// shared folder by now: the export ships it (not empty any more); the
	// cache folder is still empty: a named volume.
	out := runCLI(t, d, "projects", "--runtime-endpoint", d.endpoint())
	if !strings.Contains(out, pod[:13]) || !strings.Contains(out, "web (running)") {
		t.Errorf("cri-compose projects does not list the pod %s with web running:\n%s", pod, out)
	}
	exportDir := filepath.Join(d.dir, "exported")
	runCLI(t, d, "export", pod, "-o", exportDir, "--runtime-endpoint", d.endpoint())
	composeYAML, err := os.ReadFile(filepath.Join(exportDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d.note("%s/compose.yaml:", exportDir)
	d.transcript.WriteString(indent(string(composeYAML)))

	// The original, as the engine runs it, then stopped: the export
	// publishes the same port.
	orig := map[string]container.InspectResponse{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for svc, id := range map[string]string{"pod": pod, "web": web, "writer": writer} {
		in, err := engine.ContainerInspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		orig[svc] = in
	}
	d.crictl("stopp", pod)

	// docker compose up -d in the export's folder, under a fresh name.
	project := "e2e-export-" + runID
	t.Cleanup(func() {
		if _, err := dockerE(exportDir, "docker", "compose", "-p", project, "down", "-v", "--timeout", "1"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	d.transcript.WriteString("$ docker compose -p " + project + " up -d   # in " + exportDir + "\n")
	docker(t, exportDir, "compose", "-p", project, "up", "-d")
	ps := docker(t, exportDir, "compose", "-p", project, "ps")
	d.transcript.WriteString("$ docker compose -p " + project + " ps\n" + indent(ps))
	running := map[string]container.InspectResponse{}
	suite.Eventually(t, "the exported project's three services to run", 30*time.Second, func() (bool, string) {
		list, err := engine.ContainerList(ctx, sandbox.LabelProject+"="+project)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range list {
			in, err := engine.ContainerInspect(ctx, c.ID)
			if err != nil {
				return false, err.Error()
			}
			running[c.Labels[sandbox.LabelService]] = in
		}
		var states []string
		for svc, in := range running {
			if in.State == nil || !in.State.Running {
				return false, fmt.Sprintf("%s not running: %+v", svc, in.State)
			}
			states = append(states, svc)
		}
		return len(running) == 3, fmt.Sprint(states)
	})

	// Same images, commands, environment, limits and published ports.
	for svc, o := range orig {
		x := running[svc]
		wantImage := o.Config.Labels[sandbox.LabelImage]
		if svc == "pod" {
			wantImage = o.Config.Image
		}
		if x.Config.Image != wantImage || x.Image != o.Image {
			t.Errorf("%s: image %s (%s), want %s (%s)", svc, x.Config.Image, x.Image, wantImage, o.Image)
		}
		if !slices.Equal(x.Config.Entrypoint, o.Config.Entrypoint) || !slices.Equal(x.Config.Cmd, o.Config.Cmd) {
			t.Errorf("%s: entrypoint %q cmd %q, want %q %q", svc, x.Config.Entrypoint, x.Config.Cmd, o.Config.Entrypoint, o.Config.Cmd)
		}
		if a, b := slices.Sorted(slices.Values(x.Config.Env)), slices.Sorted(slices.Values(o.Config.Env)); !slices.Equal(a, b) {
			t.Errorf("%s: env %q, want %q", svc, a, b)
		}
		if x.HostConfig.Memory != o.HostConfig.Memory {
			t.Errorf("%s: memory limit %d, want %d", svc, x.HostConfig.Memory, o.HostConfig.Memory)
		}
		if fmt.Sprint(x.HostConfig.PortBindings) != fmt.Sprint(o.HostConfig.PortBindings) {
			t.Errorf("%s: ports %v, want %v", svc, x.HostConfig.PortBindings, o.HostConfig.PortBindings)
		}
		if x.Config.Labels[sandbox.LabelType] != "" {
			t.Errorf("%s: carries cri-compose's label %s", svc, sandbox.LabelType)
		}
	}
	d.note("the exported services run the same images, entrypoints, commands, environment, memory limit and port bindings as the pod's")
	if m := running["web"].HostConfig.NetworkMode; m != container.NetworkMode("container:"+running["pod"].ID) {
		t.Errorf("web's network mode %s, want the exported pod service's", m)
	}

	// The host's files arrived: served on the published port, and read in
	// the container.
	suite.Eventually(t, "the export to serve "+url, 30*time.Second, func() (bool, string) {
		body, err := httpGet(url)
		return err == nil && body == index, fmt.Sprint(body, err)
	})
	if got := docker(t, exportDir, "compose", "-p", project, "exec", "-T", "web", "cat", "/etc/app/app.conf"); got != conf {
		t.Errorf("app.conf in the exported web: %q, want %q", got, conf)
	}
	if got := docker(t, exportDir, "compose", "-p", project, "exec", "-T", "web", "cat", "/shared/note"); got != "from-writer\n" {
		t.Errorf("the shared folder in the exported web holds %q, want the writer's note", got)
	}
	docker(t, exportDir, "compose", "-p", project, "exec", "-T", "writer", "sh", "-c", "echo cached > /cache/v")
	if got := docker(t, exportDir, "compose", "-p", project, "exec", "-T", "web", "cat", "/cache/v"); got != "cached\n" {
		t.Errorf("the cache volume is not shared by web and writer: web reads %q", got)
	}
	// The volume is named after web, the first service that had the
	// folder, and its place in web's volumes (an order that depends on
	// the engine's API version: read-only binds are mounts on 1.44+).
	cacheVolume := func(svc string) string {
		for _, mp := range running[svc].Mounts {
			if mp.Destination == "/cache" && mp.Type == "volume" {
				return mp.Name
			}
		}
		return ""
	}
	if v, w := cacheVolume("web"), cacheVolume("writer"); !strings.HasPrefix(v, project+"_web-") || v != w {
		t.Errorf("/cache: web's volume %q, writer's %q, want one named volume %s_web-N: %+v", v, w, project, running["web"].Mounts)
	}
	logs := docker(t, exportDir, "compose", "-p", project, "logs", "--no-color", "web")
	if !strings.Contains(logs, "greeting=hello $USER") {
		t.Errorf("the exported web's log lacks greeting=hello $USER (the '$' must reach it as it was):\n%s", logs)
	}
	d.note("GET %s serves the same page from the export; /etc/app/app.conf holds the host's content; /shared holds the writer's note; web and writer share the volume %s at /cache; web logged greeting=hello $USER", url, cacheVolume("web"))

	// Where the engine lacks cri-compose's pause image, `docker compose up`
	// builds it from the shipped context: build it under another name and
	// run it.
	pauseTag := "localhost/cri-compose/e2e-pause-build:" + runID
	t.Cleanup(func() { removeImage(pauseTag) })
	d.transcript.WriteString("$ docker build -q -t " + pauseTag + " ./pause   # the infra image's shipped build context\n")
	docker(t, exportDir, "build", "-q", "-t", pauseTag, "./pause")
	if out := docker(t, exportDir, "run", "--rm", pauseTag, "--version"); out != "cri-compose pause\n" {
		t.Errorf("the pause image built from the export says %q, want cri-compose pause", out)
	}

	d.transcript.WriteString("$ docker compose -p " + project + " down -v\n")
	docker(t, exportDir, "compose", "-p", project, "down", "-v", "--timeout", "1")
	if list, _ := engine.ContainerList(ctx, sandbox.LabelProject+"="+project); len(list) != 0 {
		t.Errorf("after down the engine still has %d containers of %s", len(list), project)
	}
	d.crictl("rmp", pod)
}

// runCLI runs the cri-compose binary (a client subcommand) and returns its
// stdout; the command goes to the transcript.
func runCLI(t *testing.T, d *daemon, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, criComposeBin, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(&d.transcript, "$ cri-compose %s\n", strings.Join(args, " "))
	d.transcript.WriteString(indent(stdout.String() + stderr.String()))
	if err != nil {
		t.Fatalf("cri-compose %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s", resp.Status)
	}
	return string(b), err
}

// freeTCPPort is a TCP port free on 127.0.0.1 just now.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
