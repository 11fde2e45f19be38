package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"google.golang.org/protobuf/encoding/protojson"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Fixed identities, so that the golden files do not change from run to run.
const (
	testSandboxID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	testImageID   = "sha256:feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface"
)

// hostCaps is the bounding set of this workplace's machines (CapBnd
// 000001fffeffffff): every capability up to CAP_CHECKPOINT_RESTORE except
// CAP_SYS_RESOURCE.
var hostCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND",
	"CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// testHost is the node every golden case runs on unless it overrides parts.
func testHost() Host {
	return Host{
		Network:      "cri-compose",
		InfraImage:   "localhost/cri-compose/pause:test",
		StateDir:     "/var/lib/cri-compose",
		Capabilities: append([]string(nil), hostCaps...),
	}
}

// podCase is a testdata/<case>.pod.json file.
type podCase struct {
	Sandbox    json.RawMessage   `json:"sandbox"`
	Containers []json.RawMessage `json:"containers"`
	Host       *hostOverride     `json:"host"`
	// StagedFiles are the host paths that are files, with host.stageMounts:
	// copied into the container; every other host path is a directory,
	// staged in a volume (stage.go).
	StagedFiles []string `json:"stagedFiles"`
}

// hostOverride changes parts of testHost; absent fields keep its values.
type hostOverride struct {
	// Capabilities: absent keeps hostCaps, null means unknown (nil).
	Capabilities        json.RawMessage      `json:"capabilities"`
	FullPrivileged      *bool                `json:"fullPrivileged"`
	NegativeOOMScoreAdj *bool                `json:"negativeOOMScoreAdj"`
	AppArmor            *bool                `json:"appArmor"`
	LogConfig           *container.LogConfig `json:"logConfig"`
	StageMounts         *bool                `json:"stageMounts"`
}

func (o *hostOverride) apply(t *testing.T, h *Host) {
	if o == nil {
		return
	}
	if len(o.Capabilities) > 0 {
		var caps []string
		if err := json.Unmarshal(o.Capabilities, &caps); err != nil {
			t.Fatalf("host.capabilities: %v", err)
		}
		h.Capabilities = caps
	}
	if o.FullPrivileged != nil {
		h.FullPrivileged = *o.FullPrivileged
	}
	if o.NegativeOOMScoreAdj != nil {
		h.NegativeOOMScoreAdj = *o.NegativeOOMScoreAdj
	}
	if o.AppArmor != nil {
		h.AppArmor = *o.AppArmor
	}
	if o.LogConfig != nil {
		h.LogConfig = *o.LogConfig
	}
	if o.StageMounts != nil {
		h.StageMounts = *o.StageMounts
	}
}

// loadCase reads testdata/<name>.pod.json.
func loadCase(t *testing.T, name string) (*runtime.PodSandboxConfig, []*runtime.ContainerConfig, Host) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pc podCase
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pc); err != nil {
		t.Fatalf("%s.pod.json: %v", name, err)
	}
	sb := &runtime.PodSandboxConfig{}
	if err := protojson.Unmarshal(pc.Sandbox, sb); err != nil {
		t.Fatalf("%s.pod.json: sandbox: %v", name, err)
	}
	var ctrs []*runtime.ContainerConfig
	for i, raw := range pc.Containers {
		c := &runtime.ContainerConfig{}
		if err := protojson.Unmarshal(raw, c); err != nil {
			t.Fatalf("%s.pod.json: containers[%d]: %v", name, i, err)
		}
		ctrs = append(ctrs, c)
	}
	h := testHost()
	pc.Host.apply(t, &h)
	stagedFiles = map[string]bool{}
	for _, f := range pc.StagedFiles {
		stagedFiles[f] = true
	}
	return sb, ctrs, h
}

// stagedFiles are the current case's host paths that are files (set by
// loadCase; the golden tests do not run in parallel).
var stagedFiles map[string]bool

// staged is what pkg/cri's stager decides for c's mounts: a volume per
// directory, a copy per file.
func staged(sb *runtime.PodSandboxConfig, c *runtime.ContainerConfig, h Host) map[int]string {
	if !h.StageMounts {
		return nil
	}
	out := map[int]string{}
	for i, m := range c.GetMounts() {
		if m.GetHostPath() == "" {
			continue
		}
		if stagedFiles[m.GetHostPath()] {
			out[i] = StagedCopy
		} else {
			out[i] = StagedVolumeName(ProjectName(sb.GetMetadata()), m.GetHostPath())
		}
	}
	return out
}

// engineCreate is one engine create call as the golden file shows it.
type engineCreate struct {
	Name             string                    `json:"name"`
	Config           *container.Config         `json:"Config"`
	HostConfig       *container.HostConfig     `json:"HostConfig"`
	NetworkingConfig *network.NetworkingConfig `json:"NetworkingConfig"`
}

// render maps a case the way pkg/cri does: the infra container, then each
// container pinned to fixed ids, then the project and its compose file.
func render(t *testing.T, sb *runtime.PodSandboxConfig, ctrs []*runtime.ContainerConfig, h Host) (specs []*Spec, p *types.Project, yml []byte) {
	t.Helper()
	infra, err := SandboxSpec(sb, h)
	if err != nil {
		t.Fatalf("SandboxSpec: %v", err)
	}
	infra.SetConfigHash()
	specs = append(specs, infra)
	for _, c := range ctrs {
		s, err := ContainerSpec(ContainerInput{
			SandboxID: testSandboxID,
			Sandbox:   sb,
			Config:    c,
			ImageID:   testImageID,
			ImageRef:  c.GetImage().GetImage(),
			Staged:    staged(sb, c, h),
		}, h)
		if err != nil {
			t.Fatalf("ContainerSpec(%s): %v", c.GetMetadata().GetName(), err)
		}
		s.SetConfigHash()
		specs = append(specs, s)
	}
	var services []types.ServiceConfig
	for _, s := range specs {
		services = append(services, Service(s.Service, s.Config, s.HostConfig))
	}
	network := h.Network // as pkg/cri writes it: no network for a host-network pod
	if infra.HostConfig.NetworkMode == "host" {
		network = ""
	}
	p = Project(infra.Project, network, services...)
	yml, err = ComposeYAML(p)
	if err != nil {
		t.Fatal(err)
	}
	return specs, p, yml
}

// engineJSON renders the create bodies. The config label is protobuf JSON,
// whose spacing protojson varies from build to build on purpose: it is
// compacted so that the golden file is stable.
func engineJSON(t *testing.T, specs []*Spec) []byte {
	t.Helper()
	var out []engineCreate
	for _, s := range specs {
		cc := *s.Config
		cc.Labels = map[string]string{}
		for k, v := range s.Config.Labels {
			if k == LabelConfig {
				var buf bytes.Buffer
				if err := json.Compact(&buf, []byte(v)); err != nil {
					t.Fatalf("%s label of %s is not JSON: %v", LabelConfig, s.Name, err)
				}
				v = buf.String()
			}
			cc.Labels[k] = v
		}
		out = append(out, engineCreate{Name: s.Name, Config: &cc, HostConfig: s.HostConfig, NetworkingConfig: s.Networking})
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// loadCompose loads a compose file the way `docker compose` (v2) does, with
// compose-go's loader: validation, normalization and consistency checks on.
func loadCompose(t *testing.T, project string, yml []byte, opts ...func(*loader.Options)) *types.Project {
	t.Helper()
	dir := t.TempDir()
	details := types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml"), Content: yml}},
		Environment: types.Mapping{},
	}
	all := append([]func(*loader.Options){func(o *loader.Options) {
		o.SetProjectName(project, true)
		o.ResolvePaths = false
	}}, opts...)
	p, err := loader.LoadWithContext(context.Background(), details, all...)
	if err != nil {
		t.Fatalf("compose-go cannot load the compose file of %s: %v\n%s", project, err, yml)
	}
	return p
}

func goldenCases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".pod.json"))
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no testdata/*.pod.json")
	}
	return names
}

func TestGolden(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			sb, ctrs, h := loadCase(t, name)
			specs, _, yml := render(t, sb, ctrs, h)
			checkGolden(t, filepath.Join("testdata", name+".compose.yaml"), yml)
			checkGolden(t, filepath.Join("testdata", name+".engine.json"), engineJSON(t, specs))

			// Rendering is deterministic.
			specs2, _, yml2 := render(t, sb, ctrs, h)
			if !bytes.Equal(yml, yml2) {
				t.Error("two renderings of the compose file differ")
			}
			for i := range specs {
				if a, b := specs[i].Config.Labels[LabelConfigHash], specs2[i].Config.Labels[LabelConfigHash]; a != b {
					t.Errorf("config hash of %s is not stable: %s vs %s", specs[i].Name, a, b)
				}
			}
		})
	}
}

// TestGoldenComposeLoads proves that `docker compose` (v2) can read every
// compose file we keep, and that what it reads is what we meant.
func TestGoldenComposeLoads(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			sb, ctrs, h := loadCase(t, name)
			specs, want, yml := render(t, sb, ctrs, h)
			got := loadCompose(t, want.Name, yml)
			if got.Name != want.Name {
				t.Errorf("project name %q, want %q", got.Name, want.Name)
			}
			if len(got.Services) != len(specs) {
				t.Fatalf("loaded %d services, want %d", len(got.Services), len(specs))
			}
			if net, ok := got.Networks[h.Network]; len(want.Networks) > 0 && (!ok || !bool(net.External) || net.Name != h.Network) {
				t.Errorf("network %s: got %+v, want external", h.Network, net)
			}
			for _, s := range specs {
				w := want.Services[s.Service]
				g, ok := got.Services[s.Service]
				if !ok {
					t.Errorf("service %s missing after load", s.Service)
					continue
				}
				checkLoadedService(t, w, g)
				// `docker compose up` recreates a container whose
				// config-hash is not its own hash of the service.
				if ours, theirs := s.Config.Labels[LabelConfigHash], composeServiceHash(g); ours != theirs {
					t.Errorf("service %s: config-hash %s, but Compose computes %s from the file: `docker compose up` would recreate it", s.Service, ours, theirs)
				}
			}
		})
	}
}

// composeServiceHash is how Compose v2 (pkg/compose/hash.go, ServiceHash)
// hashes a loaded service to compare it with a container's config-hash.
func composeServiceHash(o types.ServiceConfig) string {
	o.Build = nil
	o.PullPolicy = ""
	o.Scale = nil
	if o.Deploy != nil {
		d := *o.Deploy
		d.Replicas = nil
		o.Deploy = &d
	}
	o.DependsOn = nil
	o.Profiles = nil
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// checkLoadedService compares what matters to running the pod.
func checkLoadedService(t *testing.T, want, got types.ServiceConfig) {
	t.Helper()
	eq := func(field string, w, g any) {
		t.Helper()
		wj, _ := json.Marshal(w)
		gj, _ := json.Marshal(g)
		if string(wj) == "null" && (string(gj) == "{}" || string(gj) == "[]") {
			return // the loader makes empty what we leave out
		}
		if !bytes.Equal(wj, gj) {
			t.Errorf("service %s: %s after load = %s, want %s", want.Name, field, gj, wj)
		}
	}
	eq("image", want.Image, got.Image)
	eq("entrypoint", want.Entrypoint, got.Entrypoint)
	eq("command", want.Command, got.Command)
	eq("user", want.User, got.User)
	eq("working_dir", want.WorkingDir, got.WorkingDir)
	eq("network_mode", want.NetworkMode, got.NetworkMode)
	eq("ipc", want.Ipc, got.Ipc)
	eq("pid", want.Pid, got.Pid)
	eq("labels", want.Labels, got.Labels)
	eq("environment", want.Environment, got.Environment)
	eq("cap_add", want.CapAdd, got.CapAdd)
	eq("cap_drop", want.CapDrop, got.CapDrop)
	eq("security_opt", want.SecurityOpt, got.SecurityOpt)
	eq("privileged", want.Privileged, got.Privileged)
	eq("read_only", want.ReadOnly, got.ReadOnly)
	eq("group_add", want.GroupAdd, got.GroupAdd)
	eq("sysctls", want.Sysctls, got.Sysctls)
	eq("dns", want.DNS, got.DNS)
	eq("dns_search", want.DNSSearch, got.DNSSearch)
	eq("dns_opt", want.DNSOpts, got.DNSOpts)
	eq("mem_limit", want.MemLimit, got.MemLimit)
	eq("cpu_quota", want.CPUQuota, got.CPUQuota)
	eq("cpu_period", want.CPUPeriod, got.CPUPeriod)
	eq("cpu_shares", want.CPUShares, got.CPUShares)
	eq("cpuset", want.CPUSet, got.CPUSet)
	eq("oom_score_adj", want.OomScoreAdj, got.OomScoreAdj)
	eq("devices", want.Devices, got.Devices)
	eq("device_cgroup_rules", want.DeviceCgroupRules, got.DeviceCgroupRules)
	eq("logging", want.Logging, got.Logging)
	eq("restart", want.Restart, got.Restart)
	if len(want.Ports) != len(got.Ports) {
		t.Errorf("service %s: %d ports after load, want %d", want.Name, len(got.Ports), len(want.Ports))
	}
	if len(want.Volumes) != len(got.Volumes) {
		t.Errorf("service %s: %d volumes after load, want %d", want.Name, len(got.Volumes), len(want.Volumes))
	}
	for i := range want.Volumes {
		if i < len(got.Volumes) {
			eq(fmt.Sprintf("volumes[%d]", i), want.Volumes[i], got.Volumes[i])
		}
	}
}

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./pkg/sandbox -run TestGolden -update` to create it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	t.Errorf("%s differs from the rendering (review, then rerun with -update):\n%s", path, lineDiff(string(want), string(got)))
}

// lineDiff is a short, readable hint: the first differing lines with some
// context, "-" from the golden file and "+" from the rendering.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	// Trim the common tail too.
	jw, jg := len(w), len(g)
	for jw > i && jg > i && w[jw-1] == g[jg-1] {
		jw--
		jg--
	}
	var b strings.Builder
	from := max(0, i-3)
	for k := from; k < i; k++ {
		fmt.Fprintf(&b, "  %4d  %s\n", k+1, w[k])
	}
	const limit = 40
	for k := i; k < jw && k < i+limit; k++ {
		fmt.Fprintf(&b, "- %4d  %s\n", k+1, w[k])
	}
	for k := i; k < jg && k < i+limit; k++ {
		fmt.Fprintf(&b, "+ %4d  %s\n", k+1, g[k])
	}
	if jw-i > limit || jg-i > limit {
		b.WriteString("  …\n")
	}
	return b.String()
}
