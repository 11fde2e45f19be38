package pause_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/moby/moby/api/types/container"
)

var machines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

func TestBinaryIsStaticELF(t *testing.T) {
	f, err := elf.NewFile(bytes.NewReader(pause.Binary()))
	if err != nil {
		t.Fatalf("pause.bin is not ELF: %v (regenerate it with make pause)", err)
	}
	if m, ok := machines[runtime.GOARCH]; ok && f.Machine != m {
		t.Errorf("pause.bin is for %v, this is %s (regenerate it with make pause)", f.Machine, runtime.GOARCH)
	}
	if f.Type != elf.ET_EXEC {
		t.Errorf("pause.bin is ELF type %v, want a static executable", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("pause.bin has a %v program header: it is not static", p.Type)
		}
	}
	if n := len(pause.Binary()); n > 4<<20 {
		t.Errorf("pause.bin is %d bytes; build it with make pause (stripped)", n)
	}
}

func TestRef(t *testing.T) {
	s := sha256.Sum256(pause.Binary())
	want := "localhost/cri-compose/pause:" + hex.EncodeToString(s[:])[:12]
	if got := pause.Ref(); got != want {
		t.Errorf("Ref() = %s, want %s", got, want)
	}
	if !regexp.MustCompile(`^localhost/cri-compose/pause:[0-9a-f]{12}$`).MatchString(pause.Ref()) {
		t.Errorf("Ref() = %s", pause.Ref())
	}
	ref, archive := pause.Image()
	if ref != pause.Ref() || archive == nil {
		t.Errorf("Image() = %s, archive func nil: %v", ref, archive == nil)
	}
}

func TestArchive(t *testing.T) {
	var buf bytes.Buffer
	if err := pause.Archive(&buf); err != nil {
		t.Fatal(err)
	}
	members := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		members[h.Name], _ = io.ReadAll(tr)
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(members["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json %s: %v", members["manifest.json"], err)
	}
	if strings.Join(manifest[0].RepoTags, ",") != pause.Ref() {
		t.Errorf("RepoTags = %v, want [%s]", manifest[0].RepoTags, pause.Ref())
	}
	id, err := pause.ImageID()
	if err != nil || id != "sha256:"+strings.TrimSuffix(manifest[0].Config, ".json") {
		t.Errorf("ImageID() = %s, %v; config is %s", id, err, manifest[0].Config)
	}
	var cfg struct {
		Config struct{ Entrypoint []string } `json:"config"`
	}
	if err := json.Unmarshal(members[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/pause" {
		t.Errorf("Entrypoint = %v, want [/pause]", cfg.Config.Entrypoint)
	}
	found := false
	lr := tar.NewReader(bytes.NewReader(members[manifest[0].Layers[0]]))
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "pause" {
			found = true
			data, _ := io.ReadAll(lr)
			if h.Mode != 0o755 || !bytes.Equal(data, pause.Binary()) {
				t.Errorf("/pause has mode %o and %d bytes, want 0755 and the binary", h.Mode, len(data))
			}
		}
	}
	if !found {
		t.Errorf("the layer has no /pause")
	}
}

// TestRunAndStop loads the image into the engine, runs it and stops it:
// SIGTERM must end it at once with exit code 0.
func TestRunAndStop(t *testing.T) {
	c := images.Engine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pause.Ensure(ctx, c); err != nil {
		t.Fatal(err)
	}
	img, err := c.ImageInspect(ctx, pause.Ref())
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := pause.ImageID(); img.ID != want {
		t.Errorf("engine says %s is %s, want %s", pause.Ref(), img.ID, want)
	}
	// A second Ensure finds it there.
	if err := pause.Ensure(ctx, c); err != nil {
		t.Fatal(err)
	}

	id := start(ctx, t, c, &container.Config{Image: pause.Ref()}, &container.HostConfig{})
	waitRunning(ctx, t, c, id)
	begin := time.Now()
	if err := c.ContainerStop(ctx, id, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(begin)
	st, err := c.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Running || st.State.ExitCode != 0 || st.State.OOMKilled {
		t.Errorf("after stop: running %v, exit code %d", st.State.Running, st.State.ExitCode)
	}
	if took > 5*time.Second {
		t.Errorf("stop took %v: SIGTERM did not end pause", took)
	}
}

// TestReapsZombies runs a busybox container in the pause container's PID
// namespace whose children are orphaned: they become pause's children, and
// pause must reap them when they die.
func TestReapsZombies(t *testing.T) {
	c := images.Engine(t)
	if !c.IsLocal() {
		t.Skip("the engine is not on this machine: cannot read its processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pause.Ensure(ctx, c); err != nil {
		t.Fatal(err)
	}
	const bb = "localhost/cri-compose/test-busybox:pause-test"
	images.NeedBusybox(t, c, bb)

	id := start(ctx, t, c, &container.Config{Image: pause.Ref()}, &container.HostConfig{})
	st, err := c.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	pid := st.State.Pid

	// The shell leaves five sleepers behind; they end a moment after it.
	code := images.Run(t, c, &container.Config{
		Image: bb,
		Cmd:   []string{"sh", "-c", "for i in 1 2 3 4 5; do sleep 0.5 & done; exit 0"},
	}, &container.HostConfig{PidMode: container.PidMode("container:" + id)}, time.Minute)
	if code != 0 {
		t.Fatalf("the orphaning container exited %d", code)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		z := zombies(t, pid)
		if len(z) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pause (pid %d) leaves zombie children %v", pid, z)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, err := c.ContainerInspect(ctx, id); err != nil || !st.State.Running {
		t.Errorf("pause no longer runs after reaping (%v)", err)
	}
}

// zombies lists the host pids of ppid's children that are zombies.
func zombies(t *testing.T, ppid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parens.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		if p, _ := strconv.Atoi(f[1]); p == ppid && f[0] == "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// waitRunning waits until pause runs in container id and has had time to
// install its signal handlers. A SIGTERM sent before then is lost: a PID 1
// whose disposition is still the default ignores it (the kernel protects a
// namespace's init), and the engine kills the container when the stop
// timeout ends. So does any image's PID 1; a runtime that stops a container
// right after starting it must not count on SIGTERM.
func waitRunning(ctx context.Context, t *testing.T, c *dockerapi.Client, id string) {
	t.Helper()
	st, err := c.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsLocal() || st.State.Pid == 0 {
		time.Sleep(time.Second)
		return
	}
	exe := fmt.Sprintf("/proc/%d/exe", st.State.Pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if target, err := os.Readlink(exe); err == nil && strings.HasSuffix(target, pause.Path) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d of container %s never became %s", st.State.Pid, id, pause.Path)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // from execve to signal.Notify
}

// start creates and starts a container, removed when t ends, and returns
// its id.
func start(ctx context.Context, t *testing.T, c *dockerapi.Client, cfg *container.Config, hc *container.HostConfig) string {
	t.Helper()
	id, err := c.ContainerCreate(ctx, "", cfg, hc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.ContainerRemove(ctx, id); err != nil && !dockerapi.IsNotFound(err) {
			t.Logf("remove %s: %v", id, err)
		}
	})
	if err := c.ContainerStart(ctx, id); err != nil {
		t.Fatal(err)
	}
	return id
}
