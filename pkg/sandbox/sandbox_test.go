package sandbox

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// composeName is what Compose accepts as a project name; service names are
// held to the same rule here, which is stricter than Compose's.
var composeName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// engineName is what the engine accepts as a container name.
var engineName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

func testSandbox() *runtime.PodSandboxConfig {
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1", Attempt: 0},
		Hostname:     "web",
		LogDirectory: "/var/log/pods/default_web_uid-1",
		Labels:       map[string]string{"app": "web"},
		Annotations:  map[string]string{"a": "b"},
	}
}

func testContainer() *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata: &runtime.ContainerMetadata{Name: "app", Attempt: 1},
		Image:    &runtime.ImageSpec{Image: "docker.io/library/busybox:1.36"},
		Command:  []string{"sh", "-c"},
		Args:     []string{"sleep 1"},
		Envs:     []*runtime.KeyValue{{Key: "A", Value: []byte("1")}},
		Labels:   map[string]string{"tier": "front"},
		LogPath:  "app/1.log",
	}
}

func testInput(sb *runtime.PodSandboxConfig, c *runtime.ContainerConfig) ContainerInput {
	return ContainerInput{SandboxID: testSandboxID, Sandbox: sb, Config: c, ImageID: testImageID, ImageRef: c.GetImage().GetImage()}
}

func wantInvalid(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want ErrInvalid", what)
		return
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("%s: %v, want ErrInvalid", what, err)
	}
}

func checkName(t *testing.T, what, name string, limit int) {
	t.Helper()
	if !composeName.MatchString(name) {
		t.Errorf("%s: %q is not a valid Compose name", what, name)
	}
	if limit > 0 && len(name) > limit {
		t.Errorf("%s: %q is %d characters, more than %d", what, name, len(name), limit)
	}
}

func TestProjectName(t *testing.T) {
	md := &runtime.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "u1", Attempt: 0}
	a := ProjectName(md)
	checkName(t, "plain", a, 63)
	if !strings.HasPrefix(a, "default-web-") {
		t.Errorf("ProjectName = %q, want it to start with default-web-", a)
	}
	if b := ProjectName(proto.Clone(md).(*runtime.PodSandboxMetadata)); a != b {
		t.Errorf("ProjectName is not stable: %q then %q", a, b)
	}
	other := proto.Clone(md).(*runtime.PodSandboxMetadata)
	other.Uid = "u2"
	if b := ProjectName(other); a == b {
		t.Errorf("a new uid keeps the project name %q", a)
	}
	other = proto.Clone(md).(*runtime.PodSandboxMetadata)
	other.Attempt = 1
	if b := ProjectName(other); a == b {
		t.Errorf("a new attempt keeps the project name %q", a)
	}
	// The same joined text from different parts is a different pod.
	x := ProjectName(&runtime.PodSandboxMetadata{Namespace: "a-b", Name: "c", Uid: "u"})
	y := ProjectName(&runtime.PodSandboxMetadata{Namespace: "a", Name: "b-c", Uid: "u"})
	if x == y {
		t.Errorf("namespace a-b/c and a/b-c share the project %q", x)
	}

	hostile := []*runtime.PodSandboxMetadata{
		{Namespace: "", Name: "", Uid: ""},
		{Namespace: "", Name: "web", Uid: "u"},
		{Namespace: "default", Name: "", Uid: "u"},
		{Namespace: "../..", Name: "../../etc/passwd", Uid: "u"},
		{Namespace: "Κόσμε", Name: "日本語", Uid: "u"},
		{Namespace: "UPPER", Name: "MiXeD.Case_name", Uid: "u"},
		{Namespace: "-_-", Name: "_-_", Uid: "u"},
		{Namespace: "\x00\n\t", Name: "a\nservices:\n  x: {}", Uid: "u"},
		{Namespace: strings.Repeat("n", 300), Name: strings.Repeat("p", 300), Uid: "u"},
		{Namespace: strings.Repeat("a", 53) + "_", Name: "-", Uid: "u"},
		{Namespace: "\u212a", Name: "\u0130", Uid: "u"}, // Kelvin sign, dotted capital I
		{Namespace: "ns", Name: "$(rm -rf /)", Uid: "u"},
	}
	seen := map[string]bool{}
	for _, md := range hostile {
		n := ProjectName(md)
		checkName(t, "ProjectName("+md.String()+")", n, 63)
		if seen[n] {
			t.Errorf("two hostile pods share the project %q", n)
		}
		seen[n] = true
	}
	if n := ProjectName(nil); !composeName.MatchString(n) {
		t.Errorf("ProjectName(nil) = %q", n)
	}
}

func FuzzProjectName(f *testing.F) {
	f.Add("default", "web", "uid", uint32(0))
	f.Add("", "", "", uint32(1))
	f.Add("../..", "a/../../x", "u", uint32(7))
	f.Add("Κόσμε", "日本語", "\x00", uint32(1<<31))
	f.Add(strings.Repeat("x-", 100), strings.Repeat("_", 100), "u", uint32(2))
	f.Fuzz(func(t *testing.T, ns, name, uid string, attempt uint32) {
		md := &runtime.PodSandboxMetadata{Namespace: ns, Name: name, Uid: uid, Attempt: attempt}
		n := ProjectName(md)
		checkName(t, "ProjectName", n, 63)
		if m := ProjectName(md); m != n {
			t.Fatalf("not stable: %q then %q", n, m)
		}
		md2 := proto.Clone(md).(*runtime.PodSandboxMetadata)
		md2.Attempt++
		if ProjectName(md2) == n {
			t.Fatalf("attempt %d and %d share the project %q", attempt, attempt+1, n)
		}
		md2 = proto.Clone(md).(*runtime.PodSandboxMetadata)
		md2.Uid += "x"
		if ProjectName(md2) == n {
			t.Fatalf("uid %q and %q share the project %q", uid, md2.Uid, n)
		}
		// Engine container names built on it are valid Docker names.
		if c := ContainerName(n, ServiceName(name), attempt); !engineName.MatchString(c) {
			t.Fatalf("container name %q is not a valid engine name", c)
		}
	})
}

func TestServiceName(t *testing.T) {
	for in, want := range map[string]string{
		"app":       "app",
		"web-1":     "web-1",
		"side_car":  "side_car",
		"pod":       "pod-" + shortHash(6, "pod"),
		"Web":       "web-" + shortHash(6, "Web"),
		"":          "container-" + shortHash(6, ""),
		"../..":     "container-" + shortHash(6, "../.."),
		"a b":       "a-b-" + shortHash(6, "a b"),
		"-leading":  "leading-" + shortHash(6, "-leading"),
		"trailing_": "trailing-" + shortHash(6, "trailing_"),
	} {
		if got := ServiceName(in); got != want {
			t.Errorf("ServiceName(%q) = %q, want %q", in, got, want)
		}
	}
	// Never the infra service, always valid, and different names never
	// share a service, even a name that looks like another's suffixed one.
	sample := []string{"pod", "POD", "Pod", "pod-" + shortHash(6, "pod"), "web", "Web", "WEB", "web-" + shortHash(6, "Web"),
		"", "-", "_", "--", "a", "a-", "a_", "a.b", "a/b", "a b", "ä", "日本", "../x", "x/..",
		strings.Repeat("a", 40), strings.Repeat("a", 41), strings.Repeat("a", 200), strings.Repeat("a", 200) + "b",
		strings.Repeat("a", 41) + "-" + shortHash(6, strings.Repeat("a", 41)), "container-" + shortHash(6, "")}
	seen := map[string]string{}
	for _, in := range sample {
		s := ServiceName(in)
		checkName(t, "ServiceName("+in+")", s, 0)
		if s == InfraService {
			t.Errorf("ServiceName(%q) is the infra service", in)
		}
		if prev, ok := seen[s]; ok {
			t.Errorf("ServiceName(%q) = ServiceName(%q) = %q", in, prev, s)
		}
		seen[s] = in
	}
}

func FuzzServiceName(f *testing.F) {
	for _, s := range []string{"app", "pod", "POD", "", "a b", "日本", "pod-" + shortHash(6, "pod"), strings.Repeat("z", 50)} {
		f.Add(s, s+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		sa, sb := ServiceName(a), ServiceName(b)
		checkName(t, "ServiceName", sa, 0)
		if sa == InfraService {
			t.Fatalf("ServiceName(%q) is the infra service", a)
		}
		if ServiceName(a) != sa {
			t.Fatalf("ServiceName(%q) is not stable", a)
		}
		if a != b && sa == sb {
			t.Fatalf("ServiceName(%q) = ServiceName(%q) = %q", a, b, sa)
		}
	})
}

func TestContainerName(t *testing.T) {
	if got := ContainerName("default-web-12345678", "app", 3); got != "default-web-12345678-app-1-3" {
		t.Errorf("ContainerName = %q", got)
	}
}

func TestLogPath(t *testing.T) {
	sb := &runtime.PodSandboxConfig{LogDirectory: "/var/log/pods/p"}
	for _, rel := range []string{"../x", "a/../../x", "/etc/passwd", "/var/log/pods/p/x.log", "..", ".", "a/..", "./../p2/x.log", "a/b/../../../x"} {
		_, err := LogPath(sb, &runtime.ContainerConfig{LogPath: rel})
		wantInvalid(t, "LogPath("+rel+")", err)
	}
	for rel, want := range map[string]string{
		"app/0.log":        "/var/log/pods/p/app/0.log",
		"app_0.log":        "/var/log/pods/p/app_0.log",
		"a/../b.log":       "/var/log/pods/p/b.log",
		"./app/1.log":      "/var/log/pods/p/app/1.log",
		"..app/0.log":      "/var/log/pods/p/..app/0.log",
		"app//0.log":       "/var/log/pods/p/app/0.log",
		"deep/er/path.log": "/var/log/pods/p/deep/er/path.log",
	} {
		got, err := LogPath(sb, &runtime.ContainerConfig{LogPath: rel})
		if err != nil || got != want {
			t.Errorf("LogPath(%q) = %q, %v; want %q", rel, got, err, want)
		}
	}
	if got, err := LogPath(&runtime.PodSandboxConfig{}, &runtime.ContainerConfig{LogPath: "../../x"}); got != "" || err != nil {
		t.Errorf("no log directory: LogPath = %q, %v; want \"\", nil", got, err)
	}
	if got, err := LogPath(sb, &runtime.ContainerConfig{}); got != "" || err != nil {
		t.Errorf("no log path: LogPath = %q, %v; want \"\", nil", got, err)
	}
	if got, err := LogPath(&runtime.PodSandboxConfig{LogDirectory: "/var/log/pods/p/"}, &runtime.ContainerConfig{LogPath: "a/0.log"}); err != nil || got != "/var/log/pods/p/a/0.log" {
		t.Errorf("log directory with a trailing slash: LogPath = %q, %v", got, err)
	}
	// A traversing log path makes the whole container invalid.
	c := testContainer()
	c.LogPath = "../../../etc/shadow"
	_, err := ContainerSpec(testInput(testSandbox(), c), testHost())
	wantInvalid(t, "ContainerSpec with a traversing log path", err)
}

func TestValidateSandbox(t *testing.T) {
	if err := ValidateSandbox(testSandbox()); err != nil {
		t.Fatalf("valid sandbox: %v", err)
	}
	cases := map[string]func(*runtime.PodSandboxConfig) *runtime.PodSandboxConfig{
		"nil config":             func(*runtime.PodSandboxConfig) *runtime.PodSandboxConfig { return nil },
		"no metadata":            func(c *runtime.PodSandboxConfig) *runtime.PodSandboxConfig { c.Metadata = nil; return c },
		"no name":                func(c *runtime.PodSandboxConfig) *runtime.PodSandboxConfig { c.Metadata.Name = ""; return c },
		"no namespace":           func(c *runtime.PodSandboxConfig) *runtime.PodSandboxConfig { c.Metadata.Namespace = ""; return c },
		"no uid":                 func(c *runtime.PodSandboxConfig) *runtime.PodSandboxConfig { c.Metadata.Uid = ""; return c },
		"relative log directory": func(c *runtime.PodSandboxConfig) *runtime.PodSandboxConfig { c.LogDirectory = "var/log"; return c },
	}
	for name, mutate := range cases {
		cfg := mutate(testSandbox())
		wantInvalid(t, "ValidateSandbox: "+name, ValidateSandbox(cfg))
		_, err := SandboxSpec(cfg, testHost())
		wantInvalid(t, "SandboxSpec: "+name, err)
		// A container of an invalid sandbox is invalid too.
		_, err = ContainerSpec(testInput(cfg, testContainer()), testHost())
		wantInvalid(t, "ContainerSpec in a sandbox with "+name, err)
	}
}

func TestValidateContainer(t *testing.T) {
	if err := ValidateContainer(testContainer()); err != nil {
		t.Fatalf("valid container: %v", err)
	}
	cases := map[string]func(*runtime.ContainerConfig) *runtime.ContainerConfig{
		"nil config":  func(*runtime.ContainerConfig) *runtime.ContainerConfig { return nil },
		"no metadata": func(c *runtime.ContainerConfig) *runtime.ContainerConfig { c.Metadata = nil; return c },
		"no name":     func(c *runtime.ContainerConfig) *runtime.ContainerConfig { c.Metadata.Name = ""; return c },
		"no image":    func(c *runtime.ContainerConfig) *runtime.ContainerConfig { c.Image = nil; return c },
		"empty image": func(c *runtime.ContainerConfig) *runtime.ContainerConfig { c.Image.Image = ""; return c },
		"empty env name": func(c *runtime.ContainerConfig) *runtime.ContainerConfig {
			c.Envs = append(c.Envs, &runtime.KeyValue{Value: []byte("x")})
			return c
		},
		"env name holding '='": func(c *runtime.ContainerConfig) *runtime.ContainerConfig {
			c.Envs = append(c.Envs, &runtime.KeyValue{Key: "DB_PASSWORD=s3cr3t-value", Value: []byte("x")})
			return c
		},
	}
	for name, mutate := range cases {
		cfg := mutate(testContainer())
		if !strings.HasPrefix(name, "env") && !strings.HasPrefix(name, "empty env") {
			wantInvalid(t, "ValidateContainer: "+name, ValidateContainer(cfg))
		}
		_, err := ContainerSpec(testInput(testSandbox(), cfg), testHost())
		wantInvalid(t, "ContainerSpec: "+name, err)
		// The error names the variable, never what may be its value: it
		// reaches logs and traces.
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("ContainerSpec: %s: the error holds the value: %v", name, err)
		}
	}
}

// containerWith is testContainer changed by mutate, mapped on h.
func containerWith(h Host, sb *runtime.PodSandboxConfig, mutate func(*runtime.ContainerConfig)) (*Spec, error) {
	c := testContainer()
	c.Linux = &runtime.LinuxContainerConfig{Resources: &runtime.LinuxContainerResources{}, SecurityContext: &runtime.LinuxContainerSecurityContext{}}
	mutate(c)
	if sb == nil {
		sb = testSandbox()
	}
	return ContainerSpec(testInput(sb, c), h)
}

func TestResourceValidation(t *testing.T) {
	h := testHost()
	bad := map[string]func(r *runtime.LinuxContainerResources){
		"memory below 6 MiB":      func(r *runtime.LinuxContainerResources) { r.MemoryLimitInBytes = 6<<20 - 1 },
		"memory of 1 byte":        func(r *runtime.LinuxContainerResources) { r.MemoryLimitInBytes = 1 },
		"negative memory":         func(r *runtime.LinuxContainerResources) { r.MemoryLimitInBytes = -5 },
		"cpu quota -2":            func(r *runtime.LinuxContainerResources) { r.CpuQuota = -2 },
		"cpu quota below 1ms":     func(r *runtime.LinuxContainerResources) { r.CpuQuota = 999 },
		"cpu period too small":    func(r *runtime.LinuxContainerResources) { r.CpuPeriod = 999 },
		"cpu period too large":    func(r *runtime.LinuxContainerResources) { r.CpuPeriod = 1000001 },
		"cpu shares above 262144": func(r *runtime.LinuxContainerResources) { r.CpuShares = 262145 },
		"negative cpu shares":     func(r *runtime.LinuxContainerResources) { r.CpuShares = -1 },
		"oom_score_adj 1001":      func(r *runtime.LinuxContainerResources) { r.OomScoreAdj = 1001 },
		"oom_score_adj -1001":     func(r *runtime.LinuxContainerResources) { r.OomScoreAdj = -1001 },
		"swap below memory": func(r *runtime.LinuxContainerResources) {
			r.MemoryLimitInBytes = 64 << 20
			r.MemorySwapLimitInBytes = 32 << 20
		},
		"swap below -1":            func(r *runtime.LinuxContainerResources) { r.MemorySwapLimitInBytes = -2 },
		"oom_score_adj min int64 ": func(r *runtime.LinuxContainerResources) { r.OomScoreAdj = -1 << 63 },
	}
	for name, mutate := range bad {
		_, err := containerWith(h, nil, func(c *runtime.ContainerConfig) { mutate(c.Linux.Resources) })
		wantInvalid(t, name, err)
	}

	good := map[string]func(r *runtime.LinuxContainerResources){
		"memory of exactly 6 MiB":  func(r *runtime.LinuxContainerResources) { r.MemoryLimitInBytes = 6 << 20 },
		"cpu quota -1 (unlimited)": func(r *runtime.LinuxContainerResources) { r.CpuQuota = -1 },
		"cpu shares 262144":        func(r *runtime.LinuxContainerResources) { r.CpuShares = 262144 },
		"oom_score_adj 1000":       func(r *runtime.LinuxContainerResources) { r.OomScoreAdj = 1000 },
		"oom_score_adj -1000":      func(r *runtime.LinuxContainerResources) { r.OomScoreAdj = -1000 },
		"unlimited swap": func(r *runtime.LinuxContainerResources) {
			r.MemoryLimitInBytes = 64 << 20
			r.MemorySwapLimitInBytes = -1
		},
		"swap without memory (unused)": func(r *runtime.LinuxContainerResources) { r.MemorySwapLimitInBytes = 64 << 20 },
	}
	for name, mutate := range good {
		if _, err := containerWith(h, nil, func(c *runtime.ContainerConfig) { mutate(c.Linux.Resources) }); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// A negative oom_score_adj is clamped to 0 where runc cannot set it, and
	// kept where it can.
	s, err := containerWith(h, nil, func(c *runtime.ContainerConfig) { c.Linux.Resources.OomScoreAdj = -998 })
	if err != nil || s.HostConfig.OomScoreAdj != 0 {
		t.Errorf("oom_score_adj -998 without CAP_SYS_RESOURCE: %v, %v; want 0", s.HostConfig.OomScoreAdj, err)
	}
	h.NegativeOOMScoreAdj = true
	s, err = containerWith(h, nil, func(c *runtime.ContainerConfig) { c.Linux.Resources.OomScoreAdj = -998 })
	if err != nil || s.HostConfig.OomScoreAdj != -998 {
		t.Errorf("oom_score_adj -998 with CAP_SYS_RESOURCE: %v, %v; want -998", s.HostConfig.OomScoreAdj, err)
	}
	s, err = containerWith(h, nil, func(c *runtime.ContainerConfig) { c.Linux.Resources.OomScoreAdj = 500 })
	if err != nil || s.HostConfig.OomScoreAdj != 500 {
		t.Errorf("oom_score_adj 500: %v, %v", s.HostConfig.OomScoreAdj, err)
	}
}

func TestSecurityValidation(t *testing.T) {
	h := testHost()
	_, err := containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Linux.SecurityContext.Capabilities = &runtime.Capability{AddAmbientCapabilities: []string{"NET_BIND_SERVICE"}}
	})
	wantInvalid(t, "ambient capabilities", err)

	_, err = containerWith(h, nil, func(c *runtime.ContainerConfig) { c.Linux.SecurityContext.Privileged = true })
	wantInvalid(t, "privileged container in a sandbox that is not", err)
	h.FullPrivileged = true
	_, err = containerWith(h, nil, func(c *runtime.ContainerConfig) { c.Linux.SecurityContext.Privileged = true })
	wantInvalid(t, "privileged container in a sandbox that is not, on a fully privileged host", err)
	h.FullPrivileged = false

	_, err = containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Linux.SecurityContext.RunAsGroup = &runtime.Int64Value{Value: 1}
	})
	wantInvalid(t, "run_as_group without a user", err)

	for name, sc := range map[string]*runtime.LinuxContainerSecurityContext{
		"apparmor localhost profile":        {Apparmor: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Localhost, LocalhostRef: "my-profile"}},
		"apparmor localhost profile (path)": {ApparmorProfile: "localhost/my-profile"},
	} {
		_, err := containerWith(h, nil, func(c *runtime.ContainerConfig) { c.Linux.SecurityContext = sc })
		wantInvalid(t, name+" without AppArmor", err)
		ha := h
		ha.AppArmor = true
		s, err := containerWith(ha, nil, func(c *runtime.ContainerConfig) { c.Linux.SecurityContext = sc })
		if err != nil || !slices.Contains(s.HostConfig.SecurityOpt, "apparmor=my-profile") {
			t.Errorf("%s with AppArmor: %v, %v", name, s.HostConfig.SecurityOpt, err)
		}
	}
	// Unconfined and runtime/default need nothing from a host without AppArmor.
	for _, sc := range []*runtime.LinuxContainerSecurityContext{
		{Apparmor: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Unconfined}},
		{Apparmor: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_RuntimeDefault}},
		{ApparmorProfile: "unconfined"},
		{ApparmorProfile: "runtime/default"},
	} {
		s, err := containerWith(h, nil, func(c *runtime.ContainerConfig) { c.Linux.SecurityContext = sc })
		if err != nil || slices.ContainsFunc(s.HostConfig.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "apparmor") }) {
			t.Errorf("apparmor %v without AppArmor: %v, %v", sc, s.HostConfig.SecurityOpt, err)
		}
	}

	// Localhost seccomp: the caller reads the file; without it, invalid.
	local := &runtime.LinuxContainerSecurityContext{Seccomp: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_Localhost, LocalhostRef: "/var/lib/kubelet/seccomp/p.json"}}
	c := testContainer()
	c.Linux = &runtime.LinuxContainerConfig{SecurityContext: local}
	if p := SeccompProfilePath(c); p != "/var/lib/kubelet/seccomp/p.json" {
		t.Errorf("SeccompProfilePath = %q", p)
	}
	_, err = ContainerSpec(testInput(testSandbox(), c), h)
	wantInvalid(t, "localhost seccomp profile not read", err)
	in := testInput(testSandbox(), c)
	in.SeccompProfile = []byte(`{"defaultAction":"SCMP_ACT_ALLOW"}`)
	s, err := ContainerSpec(in, h)
	if err != nil || !slices.Contains(s.HostConfig.SecurityOpt, `seccomp={"defaultAction":"SCMP_ACT_ALLOW"}`) {
		t.Errorf("localhost seccomp profile: %v, %v", s.HostConfig.SecurityOpt, err)
	}
	c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{SeccompProfilePath: "localhost/profiles/p.json"}
	if p := SeccompProfilePath(c); p != "profiles/p.json" {
		t.Errorf("SeccompProfilePath (legacy) = %q", p)
	}
	c.Linux.SecurityContext = &runtime.LinuxContainerSecurityContext{Seccomp: &runtime.SecurityProfile{ProfileType: runtime.SecurityProfile_RuntimeDefault}}
	if p := SeccompProfilePath(c); p != "" {
		t.Errorf("SeccompProfilePath (runtime default) = %q", p)
	}
}

func TestCapabilities(t *testing.T) {
	h := testHost()
	s, err := containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Linux.SecurityContext.Capabilities = &runtime.Capability{
			AddCapabilities:  []string{"net_admin", "CAP_SYS_RESOURCE", "NET_ADMIN", "sys_time"},
			DropCapabilities: []string{"mknod", "ALL"},
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"CAP_NET_ADMIN", "CAP_SYS_TIME"}; !slices.Equal(s.HostConfig.CapAdd, want) {
		t.Errorf("CapAdd = %v, want %v (CAP_SYS_RESOURCE is not in the host's set)", s.HostConfig.CapAdd, want)
	}
	if want := []string{"CAP_MKNOD", "ALL"}; !slices.Equal(s.HostConfig.CapDrop, want) {
		t.Errorf("CapDrop = %v, want %v", s.HostConfig.CapDrop, want)
	}
	s, err = containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Linux.SecurityContext.Capabilities = &runtime.Capability{AddCapabilities: []string{"ALL"}}
	})
	want := slices.Sorted(slices.Values(hostCaps))
	if err != nil || !slices.Equal(s.HostConfig.CapAdd, want) {
		t.Errorf("add ALL: CapAdd = %v, %v; want the host's set", s.HostConfig.CapAdd, err)
	}
	// An unknown host set clamps nothing.
	h.Capabilities = nil
	s, err = containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Linux.SecurityContext.Capabilities = &runtime.Capability{AddCapabilities: []string{"ALL", "sys_resource"}}
	})
	if err != nil || !slices.Equal(s.HostConfig.CapAdd, []string{"ALL", "CAP_SYS_RESOURCE"}) {
		t.Errorf("unknown host set: CapAdd = %v, %v", s.HostConfig.CapAdd, err)
	}
}

func TestPrivilegedNeedsNoHostSet(t *testing.T) {
	// With the host's set unknown, privileged is real privileged.
	h := testHost()
	h.Capabilities = nil
	sb := testSandbox()
	sb.Linux = &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{Privileged: true}}
	s, err := containerWith(h, sb, func(c *runtime.ContainerConfig) { c.Linux.SecurityContext.Privileged = true })
	if err != nil || !s.HostConfig.Privileged || s.HostConfig.CapAdd != nil {
		t.Errorf("privileged on an unknown host: Privileged %v CapAdd %v, %v", s.HostConfig.Privileged, s.HostConfig.CapAdd, err)
	}
}

func TestOtherValidation(t *testing.T) {
	h := testHost()
	sbWith := func(mutate func(*runtime.PodSandboxConfig)) error {
		sb := testSandbox()
		mutate(sb)
		_, err := SandboxSpec(sb, h)
		return err
	}
	wantInvalid(t, "bad dns server", sbWith(func(sb *runtime.PodSandboxConfig) {
		sb.DnsConfig = &runtime.DNSConfig{Servers: []string{"not-an-ip"}}
	}))
	wantInvalid(t, "container port 0", sbWith(func(sb *runtime.PodSandboxConfig) {
		sb.PortMappings = []*runtime.PortMapping{{ContainerPort: 0, HostPort: 80}}
	}))
	wantInvalid(t, "container port 70000", sbWith(func(sb *runtime.PodSandboxConfig) {
		sb.PortMappings = []*runtime.PortMapping{{ContainerPort: 70000}}
	}))
	wantInvalid(t, "host port -1", sbWith(func(sb *runtime.PodSandboxConfig) {
		sb.PortMappings = []*runtime.PortMapping{{ContainerPort: 80, HostPort: -1}}
	}))
	wantInvalid(t, "bad host ip", sbWith(func(sb *runtime.PodSandboxConfig) {
		sb.PortMappings = []*runtime.PortMapping{{ContainerPort: 80, HostPort: 80, HostIp: "localhost"}}
	}))

	_, err := containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Mounts = []*runtime.Mount{{HostPath: "/data", ContainerPath: "data"}}
	})
	wantInvalid(t, "relative mount target", err)
	_, err = containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Mounts = []*runtime.Mount{{HostPath: "/data:/etc", ContainerPath: "/data"}}
	})
	wantInvalid(t, "':' in a mount source", err)
	_, err = containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Mounts = []*runtime.Mount{{HostPath: "", ContainerPath: "/data"}}
	})
	wantInvalid(t, "mount without a source", err)
	_, err = containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Devices = []*runtime.Device{{HostPath: "/dev/fuse"}}
	})
	wantInvalid(t, "device without a target", err)
	_, err = containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Linux.SecurityContext.NamespaceOptions = &runtime.NamespaceOption{Pid: runtime.NamespaceMode_TARGET}
	})
	wantInvalid(t, "pid TARGET without a target", err)
	s, err := containerWith(h, nil, func(c *runtime.ContainerConfig) {
		c.Linux.SecurityContext.NamespaceOptions = &runtime.NamespaceOption{Pid: runtime.NamespaceMode_TARGET, TargetId: "abc"}
	})
	if err != nil || s.HostConfig.PidMode != "container:abc" {
		t.Errorf("pid TARGET: %q, %v", s.HostConfig.PidMode, err)
	}
}

func TestParseLabelsRoundTrip(t *testing.T) {
	h := testHost()
	sb := testSandbox()
	infra, err := SandboxSpec(sb, h)
	if err != nil {
		t.Fatal(err)
	}
	infra.SetConfigHash()
	obj, ok, err := ParseLabels(infra.Config.Labels)
	if !ok || err != nil {
		t.Fatalf("ParseLabels(infra) = ok %v, %v", ok, err)
	}
	if obj.Type != TypeSandbox || obj.Project != infra.Project || obj.Service != InfraService || obj.Container != nil {
		t.Errorf("infra object = %+v", obj)
	}
	if !proto.Equal(obj.Sandbox, sb) {
		t.Errorf("sandbox config does not round-trip:\n got %v\nwant %v", obj.Sandbox, sb)
	}

	c := testContainer()
	c.Annotations = map[string]string{"io.kubernetes.container.hash": "abc", "weird": "a\nb: c"}
	c.Linux = &runtime.LinuxContainerConfig{
		Resources:       &runtime.LinuxContainerResources{CpuShares: 2, MemoryLimitInBytes: 64 << 20, Unified: map[string]string{"memory.high": "1"}},
		SecurityContext: &runtime.LinuxContainerSecurityContext{RunAsUser: &runtime.Int64Value{Value: 0}, MaskedPaths: []string{"/proc/kcore"}},
	}
	c.Envs = append(c.Envs, &runtime.KeyValue{Key: "BIN", Value: []byte{0xff, 0x00, '\n'}})
	s, err := ContainerSpec(testInput(sb, c), h)
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfigHash()
	obj, ok, err = ParseLabels(s.Config.Labels)
	if !ok || err != nil {
		t.Fatalf("ParseLabels(container) = ok %v, %v", ok, err)
	}
	if obj.Type != TypeContainer || obj.Project != infra.Project || obj.Service != "app" ||
		obj.SandboxID != testSandboxID || obj.Image != c.Image.Image ||
		obj.LogPath != "/var/log/pods/default_web_uid-1/app/1.log" || obj.Sandbox != nil {
		t.Errorf("container object = %+v", obj)
	}
	if !proto.Equal(obj.Container, c) {
		t.Errorf("container config does not round-trip:\n got %v\nwant %v", obj.Container, c)
	}

	// Not ours.
	for _, l := range []map[string]string{
		nil,
		{},
		{LabelProject: "someone", LabelService: "web", LabelOneoff: "False"},
		{LabelType: "volume", LabelConfig: "{}"},
		{LabelType: "", LabelConfig: "{}"},
	} {
		if obj, ok, err := ParseLabels(l); ok || obj != nil || err != nil {
			t.Errorf("ParseLabels(%v) = %v, %v, %v; want not ours", l, obj, ok, err)
		}
	}
	// Ours, but damaged: an error, not a silent empty config.
	if _, ok, err := ParseLabels(map[string]string{LabelType: TypeContainer, LabelConfig: "{not json"}); !ok || err == nil {
		t.Errorf("damaged config label: ok %v, err %v; want ours with an error", ok, err)
	}
}

func TestCRILabelsCannotOverwriteOurs(t *testing.T) {
	c := testContainer()
	c.Labels = map[string]string{
		LabelType:          "evil",
		LabelSandboxID:     "evil",
		LabelConfig:        `{"metadata":{"name":"evil"}}`,
		LabelImage:         "evil",
		LabelLogPath:       "/etc/shadow",
		LabelProject:       "evil",
		LabelService:       "evil",
		LabelOneoff:        "True",
		LabelNumber:        "9",
		LabelConfigHash:    "evil",
		LabelWorkingDir:    "/",
		LabelConfigFiles:   "/etc/passwd",
		LabelDependsOn:     "evil",
		LabelVersion:       "evil",
		LabelPodName:       "evil",
		LabelPodNamespace:  "evil",
		LabelPodUID:        "evil",
		LabelContainerName: "evil",
		"app":              "kept",
	}
	h := testHost()
	s, err := ContainerSpec(testInput(testSandbox(), c), h)
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfigHash()
	l := s.Config.Labels
	for k, v := range l {
		if v == "evil" || v == "/etc/shadow" || v == "/etc/passwd" || v == "True" || v == "9" || v == "/" {
			t.Errorf("label %s = %q came from the request", k, v)
		}
	}
	if l["app"] != "kept" {
		t.Errorf("a plain CRI label was lost: %v", l)
	}
	obj, ok, err := ParseLabels(l)
	if !ok || err != nil || obj.Type != TypeContainer || obj.SandboxID != testSandboxID || obj.Service != "app" {
		t.Fatalf("ParseLabels = %+v, %v, %v", obj, ok, err)
	}
	if !proto.Equal(obj.Container, c) {
		t.Errorf("the config label is not the request's config")
	}
	// Nor do they reach the compose file, where Compose would read them.
	svc := Service(s.Service, s.Config, s.HostConfig)
	for k := range svc.Labels {
		if strings.HasPrefix(k, "com.docker.compose.") || strings.HasPrefix(k, "io.cri-compose.") {
			t.Errorf("compose file has the label %s", k)
		}
	}
	if svc.Labels[LabelPodName] != "web" || svc.Labels["app"] != "kept" {
		t.Errorf("compose file labels = %v", svc.Labels)
	}
}

// TestHostileStringsStayStrings puts YAML syntax, newlines, interpolation
// syntax and quotes in everything a request can name, and checks that the
// compose file, as `docker compose` loads it (interpolation on), holds the
// same strings and no more structure than we rendered.
func TestHostileStringsStayStrings(t *testing.T) {
	hostile := []string{
		"a\nservices:\n  evil:\n    image: evil\n    privileged: true",
		"x: y\n- z\n---\n...",
		"'single' \"double\" `back`",
		"$HOME ${HOME} $${HOME} ${X:?boom} ${Y:-def} $$ $",
		"# not a comment",
		"&anchor *alias !!binary |",
		"{flow: [1, 2]}",
		"  leading and trailing  ",
		"tab\there\r\nCRLF",
		"true", "null", "~", "0x10", "1e3", "", "-", "?",
		"日本語 ü \u2028 \u00a0",
	}
	sb := testSandbox()
	sb.Metadata.Name = hostile[0]
	sb.Metadata.Namespace = hostile[1]
	sb.Hostname = hostile[3]
	c := testContainer()
	c.Metadata.Name = hostile[0]
	c.Labels = map[string]string{}
	c.Envs = nil
	for i, s := range hostile {
		c.Labels["l"+string(rune('a'+i))] = s
		c.Envs = append(c.Envs, &runtime.KeyValue{Key: "E" + string(rune('A'+i)), Value: []byte(s)})
		c.Labels[s+"-key"] = s
	}
	binary := string([]byte{'a', 0xff, 0xfe, 0, '$', 'b'}) // env values are bytes
	c.Envs = append(c.Envs, &runtime.KeyValue{Key: "BINARY", Value: []byte(binary)})
	c.Command = hostile
	c.Args = hostile
	c.WorkingDir = "/" + hostile[3]
	c.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{RunAsUsername: hostile[2]}}

	h := testHost()
	specs, want, yml := render(t, sb, []*runtime.ContainerConfig{c}, h)
	got := loadCompose(t, want.Name, yml)
	if names, want := got.ServiceNames(), slices.Sorted(slices.Values([]string{InfraService, specs[1].Service})); !slices.Equal(names, want) {
		t.Fatalf("services after load = %v, want %v\n%s", names, want, yml)
	}
	checkName(t, "project", want.Name, 63)
	checkName(t, "service", specs[1].Service, 0)
	w, g := want.Services[specs[1].Service], got.Services[specs[1].Service]
	checkLoadedService(t, w, g)
	for _, s := range specs {
		if ours, theirs := s.Config.Labels[LabelConfigHash], composeServiceHash(got.Services[s.Service]); ours != theirs {
			t.Errorf("service %s: config-hash %s, Compose's %s", s.Service, ours, theirs)
		}
	}
	if !slices.Equal([]string(g.Entrypoint), hostile) || !slices.Equal([]string(g.Command), hostile) {
		t.Errorf("entrypoint/command after load:\n%q\n%q", g.Entrypoint, g.Command)
	}
	for i, s := range hostile {
		k := "E" + string(rune('A'+i))
		if v := g.Environment[k]; v == nil || *v != s {
			t.Errorf("environment %s after load = %v, want %q", k, v, s)
		}
		if v := g.Labels["l"+string(rune('a'+i))]; v != s {
			t.Errorf("label l%c after load = %q, want %q", 'a'+i, v, s)
		}
		if v, ok := g.Labels[s+"-key"]; !ok || v != s {
			t.Errorf("label %q after load = %q (%v)", s+"-key", v, ok)
		}
	}
	if v := g.Environment["BINARY"]; v == nil || *v != binary {
		t.Errorf("binary environment value after load = %v, want %q", v, binary)
	}
	if g.WorkingDir != c.WorkingDir || g.User != hostile[2] {
		t.Errorf("working_dir %q user %q after load", g.WorkingDir, g.User)
	}
	if g.Labels[LabelPodName] != hostile[0] || g.Labels[LabelPodNamespace] != hostile[1] {
		t.Errorf("pod labels after load: %q %q", g.Labels[LabelPodName], g.Labels[LabelPodNamespace])
	}
	if p := got.Services[InfraService]; p.Hostname != hostile[3] {
		t.Errorf("hostname after load = %q, want %q", p.Hostname, hostile[3])
	}
	if g.Privileged || got.Services[InfraService].Privileged {
		t.Error("a request made a privileged service")
	}
}

func TestComposeYAMLShape(t *testing.T) {
	sb, ctrs, h := loadCase(t, "basic")
	_, p, yml := render(t, sb, ctrs, h)
	if strings.Contains(string(yml), "\nname:") || strings.HasPrefix(string(yml), "name:") {
		t.Errorf("compose file has a top-level name (Compose v1 rejects it):\n%s", yml)
	}
	// The project name comes from the folder, which is named after it.
	if dir := h.ProjectDir(p.Name); !strings.HasSuffix(dir, "/"+p.Name) {
		t.Errorf("ProjectDir(%s) = %s", p.Name, dir)
	}
	// Host network: no network to declare.
	svc := types.ServiceConfig{Name: "pod"}
	svc.NetworkMode = "host"
	svc.Image = "i"
	noNet := Project("x", "", svc)
	b, err := ComposeYAML(noNet)
	if err != nil || strings.Contains(string(b), "networks:") {
		t.Errorf("project without a network:\n%s (%v)", b, err)
	}
	// Service survives missing configs.
	if s := Service("x", nil, nil); s.Name != "x" {
		t.Errorf("Service(nil, nil) = %+v", s)
	}
}

// TestServiceOfInspectedContainer: after a restart the store rebuilds
// services from inspected containers, whose HostConfig the engine fills in
// (default masked paths, private IPC); the service must come out the same.
func TestServiceOfInspectedContainer(t *testing.T) {
	sb, ctrs, h := loadCase(t, "security")
	specs, _, _ := render(t, sb, ctrs, h)
	for _, s := range specs {
		want := Service(s.Service, s.Config, s.HostConfig)
		hc := *s.HostConfig
		if hc.MaskedPaths == nil {
			hc.MaskedPaths = []string{"/proc/kcore", "/proc/keys"}
			hc.ReadonlyPaths = []string{"/proc/sys"}
		}
		got := Service(s.Service, s.Config, &hc)
		if ConfigHash(got) != ConfigHash(want) {
			t.Errorf("service %s changes once the engine fills in its defaults", s.Service)
		}
	}
}
