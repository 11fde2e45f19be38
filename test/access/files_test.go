package access

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// readHelperEnv makes the test binary try, as whoever runs it, to read
// each file and list each folder named on its stdin ("f PATH", "d PATH",
// and "s PATH" for a path it must at least reach); it prints one line per
// success ("READ PATH", "LISTED PATH") and per failure to reach
// ("UNREACHABLE PATH err").
const readHelperEnv = "CC_ACCESS_READ"

func readHelper(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		kind, p, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch kind {
		case "s":
			if _, err := os.Stat(p); err != nil {
				fmt.Fprintf(out, "UNREACHABLE %s %v\n", p, err)
			}
		case "f":
			if f, err := os.Open(p); err == nil {
				if _, err := f.Read(make([]byte, 1)); err == nil || err == io.EOF {
					fmt.Fprintf(out, "READ %s\n", p)
				}
				f.Close()
			}
		case "d":
			if f, err := os.Open(p); err == nil {
				if _, err := f.ReadDir(1); err == nil || err == io.EOF {
					fmt.Fprintf(out, "LISTED %s\n", p)
				}
				f.Close()
			}
		}
	}
	return 0
}

// filesImage is the busybox image the pods run.
const filesImage = "localhost/cri-compose/test-busybox:access"

// asNobody runs the read helper as uid and gid 65534 with only groups as
// supplementary groups (none: an ordinary other user), on every file and
// folder under roots (walked as root; symbolic links are not followed),
// and returns what it could read or list. A root it cannot even reach
// fails t: then the folders above, not cri-compose's modes, would be
// what keeps it out.
func asNobody(t *testing.T, bin string, roots []string, groups ...uint32) []string {
	t.Helper()
	var list strings.Builder
	n := 0
	for _, root := range roots {
		fmt.Fprintf(&list, "s %s\n", root)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case d.Type()&fs.ModeSymlink != 0:
			case d.IsDir():
				fmt.Fprintf(&list, "d %s\n", p)
				n++
			default:
				fmt.Fprintf(&list, "f %s\n", p)
				n++
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", root, err)
		}
	}
	cmd := exec.Command(bin)
	cmd.Env = []string{readHelperEnv + "=1"}
	cmd.Stdin = strings.NewReader(list.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("read helper as nobody: %v\n%s", err, out)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "UNREACHABLE ") {
			t.Fatalf("nobody cannot reach %s: the test would prove nothing", strings.TrimPrefix(line, "UNREACHABLE "))
		}
		if line != "" {
			got = append(got, line)
		}
	}
	t.Logf("as nobody (groups %v): %d files and folders tried, %d readable", groups, n, len(got))
	return got
}

// checkModes fails t on any file or folder under roots that grants other
// users anything, but for a pod's resolv.conf (0644 for its containers'
// users, behind a closed folder) and the image's own files in an image
// volume copy; and on compose files, log files and folders of other modes
// than want.
func checkModes(t *testing.T, stateDir string, roots []string, dirMode, composeMode fs.FileMode) {
	t.Helper()
	imageVolumes := filepath.Join(stateDir, "image-volumes")
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Errorf("walk %s: %v", p, err)
				return nil
			}
			if d.IsDir() && filepath.Dir(filepath.Dir(p)) == imageVolumes {
				return fs.SkipDir // image-volumes/<id>/rootfs: the image's modes
			}
			if d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				t.Errorf("%s: %v", p, err)
				return nil
			}
			m := fi.Mode().Perm()
			switch {
			case d.Name() == "resolv.conf":
				if m != 0o644 {
					t.Errorf("%s: mode %o, want 0644", p, m)
				}
			case d.IsDir() && m != dirMode && p != imageVolumes && filepath.Dir(p) != imageVolumes:
				t.Errorf("%s: folder mode %o, want %o", p, m, dirMode)
			case d.IsDir() && m&0o007 != 0:
				t.Errorf("%s: folder mode %o opens it to others", p, m)
			case d.Name() == "compose.yaml" && m != composeMode:
				t.Errorf("%s: mode %o, want %o", p, m, composeMode)
			case strings.HasSuffix(p, ".log") && m != 0o640:
				t.Errorf("%s: mode %o, want 0640", p, m)
			case m&0o007 != 0:
				t.Errorf("%s: mode %o opens it to others", p, m)
			}
			return nil
		})
	}
}

// TestFilesClosed runs a pod whose environment holds secrets (its
// container runs as nobody, with an image volume and a resolv.conf, so
// every kind of file cri-compose writes is there) and checks, as the
// local user nobody, that none of the state dir, its compose files and
// the CRI logs can be read or listed. Then it opens the state dir as
// older versions left it (0755 folders, 0644 compose files) and restarts
// cri-compose: the pod is still there and working and everything is
// closed again. Then with --socket-group a member of the group reads the
// compose file and the log (crictl logs), and nobody else still nothing.
// cri-compose runs at -v=10 throughout, and its log never holds a secret.
func TestFilesClosed(t *testing.T) {
	t.Parallel()
	group, gid := newGroup(t)
	eng := suite.NewEngine(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := eng.Ping(ctx); err != nil {
		images.SkipOrFail(t, "no Docker engine answers at %s: %v", eng.Host(), err)
	}
	images.NeedBusybox(t, eng.Client, filesImage)
	ns := "access-" + suite.RunID() + "-files"
	var network string
	t.Cleanup(func() { // registered first: runs after the daemon stopped
		if left := eng.Sweep(ns, network); len(left) > 0 {
			t.Logf("cleanup removed containers the test left: %v", left)
		}
	})
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	secret := "s3cr3t-" + hex.EncodeToString(b)
	d := suite.NewDaemon(t, suite.DaemonConfig{Args: []string{"-v=10"}})
	network = d.Cfg.Network
	// Others may reach the daemon's folder: the modes of what cri-compose
	// writes under it are under test.
	if err := os.Chmod(d.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The folder of pod log folders exists, as /var/log/pods does; each
	// pod's log folder is cri-compose's to make, as under crictl and
	// vk-cri (kubelet makes its own, 0755).
	if err := os.MkdirAll(d.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkServerLogs(t, d.Dir, secret) }) // before the daemon's folder goes
	d.Start()
	bin := helperCopy(t)

	ctr := func(name string) *runtime.ContainerConfig {
		return &runtime.ContainerConfig{
			Metadata: &runtime.ContainerMetadata{Name: name},
			Image:    &runtime.ImageSpec{Image: filesImage},
			// As nobody, it still reads its resolv.conf and image volume,
			// which live behind cri-compose's closed folders.
			Command: []string{"sh", "-c", "cat /etc/resolv.conf >/dev/null && test -x /img/bin/sh && echo ok uid=$(id -u) DB_PASSWORD=$DB_PASSWORD; exec sleep 3600"},
			Envs:    []*runtime.KeyValue{{Key: "DB_PASSWORD", Value: []byte(secret)}},
			Mounts:  []*runtime.Mount{{ContainerPath: "/img", Image: &runtime.ImageSpec{Image: filesImage}, Readonly: true}},
			Linux: &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
				RunAsUser: &runtime.Int64Value{Value: 65534}}},
			LogPath: name + "/0.log",
		}
	}
	type podRun struct {
		id          string
		cfg         *runtime.PodSandboxConfig
		composeFile string
	}
	var pods []podRun
	runPod := func(t *testing.T, name string) podRun {
		t.Helper()
		cfg := &runtime.PodSandboxConfig{
			Metadata:     &runtime.PodSandboxMetadata{Name: name, Namespace: ns, Uid: "uid-" + ns + "-" + name},
			Hostname:     name,
			LogDirectory: filepath.Join(d.LogDir, ns+"_"+name), // made by cri-compose, as for crictl and vk-cri
			DnsConfig:    &runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"svc.cluster.local"}},
			Annotations:  map[string]string{"example.com/token": secret + "-annotation"},
		}
		r, err := d.RT.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			t.Fatalf("RunPodSandbox: %v", err)
		}
		p := podRun{id: r.GetPodSandboxId(), cfg: cfg,
			composeFile: filepath.Join(d.StateDir, "projects", sandbox.ProjectName(cfg.GetMetadata()), "compose.yaml")}
		pods = append(pods, p)
		return p
	}
	startCtr := func(t *testing.T, p podRun, name string) string {
		t.Helper()
		cr, err := d.RT.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: p.id, SandboxConfig: p.cfg, Config: ctr(name)})
		if err != nil {
			t.Fatalf("CreateContainer %s: %v", name, err)
		}
		if _, err := d.RT.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: cr.GetContainerId()}); err != nil {
			t.Fatalf("StartContainer %s: %v", name, err)
		}
		suite.WaitCRILog(t, filepath.Join(p.cfg.GetLogDirectory(), name, "0.log"), "ok uid=65534 DB_PASSWORD="+secret, 30*time.Second)
		if b, err := os.ReadFile(p.composeFile); err != nil || !strings.Contains(string(b), secret) {
			t.Fatalf("the compose file %s should hold the secret (it is what is protected): %v", p.composeFile, err)
		}
		return cr.GetContainerId()
	}
	defer func() {
		for _, p := range pods {
			if _, err := d.RT.StopPodSandbox(ctx, &runtime.StopPodSandboxRequest{PodSandboxId: p.id}); err != nil {
				t.Error(err)
			}
			if _, err := d.RT.RemovePodSandbox(ctx, &runtime.RemovePodSandboxRequest{PodSandboxId: p.id}); err != nil {
				t.Error(err)
			}
		}
	}()
	pod := runPod(t, "files")
	appID := startCtr(t, pod, "app")
	if _, err := os.Stat(filepath.Join(d.StateDir, "image-volumes")); err != nil {
		t.Fatalf("no image volume copy in the state dir: %v", err)
	}
	roots := []string{d.StateDir, pod.cfg.GetLogDirectory()}

	t.Run("closed", func(t *testing.T) {
		if got := asNobody(t, bin, roots); len(got) > 0 {
			t.Errorf("another user reads or lists %d paths, the first: %s", len(got), got[0])
		}
		checkModes(t, d.StateDir, roots, 0o700, 0o600)
	})

	t.Run("older state dir closed at restart", func(t *testing.T) {
		d.Stop(syscall.SIGTERM)
		// What earlier versions made in the state dir: folders 0755,
		// compose files 0644. (Their CRI log files were 0640 already; the
		// log folders they made stay as they are, like kubelet's.)
		for _, root := range []string{d.StateDir} {
			_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				switch {
				case e.IsDir() && strings.HasPrefix(p, filepath.Join(d.StateDir, "image-volumes")):
					return fs.SkipDir // 0700 then already
				case e.IsDir():
					return os.Chmod(p, 0o755)
				case e.Name() == "compose.yaml":
					return os.Chmod(p, 0o644)
				}
				return nil
			})
		}
		if got := asNobody(t, bin, roots); !slices.Contains(got, "READ "+pod.composeFile) {
			t.Fatalf("with the old modes nobody should read %s (else this test proves nothing); read: %v", pod.composeFile, got)
		}
		d.Start()
		list, err := d.RT.ListPodSandbox(ctx, &runtime.ListPodSandboxRequest{Filter: &runtime.PodSandboxFilter{Id: pod.id}})
		if err != nil || len(list.GetItems()) != 1 || list.GetItems()[0].GetState() != runtime.PodSandboxState_SANDBOX_READY {
			t.Fatalf("after the restart the pod is %v (%v), want READY", list.GetItems(), err)
		}
		st, err := d.RT.ContainerStatus(ctx, &runtime.ContainerStatusRequest{ContainerId: appID})
		if err != nil || st.GetStatus().GetState() != runtime.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("after the restart the container is %v (%v), want RUNNING", st.GetStatus().GetState(), err)
		}
		ex, err := d.RT.ExecSync(ctx, &runtime.ExecSyncRequest{ContainerId: appID, Cmd: []string{"sh", "-c", "echo $DB_PASSWORD"}, Timeout: 10})
		if err != nil || strings.TrimSpace(string(ex.GetStdout())) != secret {
			t.Fatalf("ExecSync in the container after the restart: %q %v", ex.GetStdout(), err)
		}
		startCtr(t, pod, "after") // the pod takes new containers: its compose file is rewritten
		if got := asNobody(t, bin, roots); len(got) > 0 {
			t.Errorf("after the restart another user reads or lists %d paths, the first: %s", len(got), got[0])
		}
		checkModes(t, d.StateDir, roots, 0o700, 0o600)
	})

	t.Run("socket group", func(t *testing.T) {
		d.Stop(syscall.SIGTERM)
		d.Cfg.Args = append(d.Cfg.Args, "--socket-group", group)
		d.Start()
		// Log folders made before stay root's (a pod log folder may be
		// kubelet's): a pod started now has its log readable by the group.
		grp := runPod(t, "files-group")
		startCtr(t, grp, "app")
		roots := append(roots, grp.cfg.GetLogDirectory())
		if got := asNobody(t, bin, roots); len(got) > 0 {
			t.Errorf("a user outside the socket group reads or lists %d paths, the first: %s", len(got), got[0])
		}
		got := asNobody(t, bin, roots, uint32(gid))
		for _, want := range []string{"READ " + pod.composeFile, "READ " + grp.composeFile, "LISTED " + d.StateDir,
			"READ " + filepath.Join(grp.cfg.GetLogDirectory(), "app", "0.log"), "LISTED " + grp.cfg.GetLogDirectory()} {
			if !slices.Contains(got, want) {
				t.Errorf("a member of the socket group cannot: %s", want)
			}
		}
		checkModes(t, d.StateDir, []string{d.StateDir, grp.cfg.GetLogDirectory()}, 0o750, 0o640)
		for _, p := range []string{pod.composeFile, grp.composeFile} {
			if fi, err := os.Stat(p); err != nil || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
				t.Errorf("%s: %v, want group %s", p, err, group)
			}
		}
	})
}

// checkServerLogs fails t when a log of the daemon in dir (one per start,
// at -v=10) holds secret, as it is or in base64.
func checkServerLogs(t *testing.T, dir, secret string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "cri-compose.*.log"))
	if len(logs) == 0 {
		t.Errorf("no server log in %s", dir)
	}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), base64.RawStdEncoding.EncodeToString([]byte(secret))} {
			if i := strings.Index(string(b), form); i >= 0 {
				t.Errorf("%s holds the secret: …%s…", p, b[max(0, i-200):min(len(b), i+50)])
			}
		}
	}
}
