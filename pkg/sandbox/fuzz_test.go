package sandbox

// Hostile input: CRI requests as a client could send them, down
// to arbitrary protobuf bytes, never panic the mapping, never leave the
// state dir or the log directory, never make a container privileged that
// did not ask, never override a label cri-compose or Compose trusts, and
// never inject into the compose file. Seed corpora: testdata/fuzz/<Fuzz…>;
// `make fuzz` runs each target for FUZZTIME.

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/moby/api/types/container"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"
)

// fuzzHost is a host whose bounding set lacks some capabilities, as on
// this kind of machine.
var fuzzHost = Host{
	Network: "cri-compose", InfraImage: "localhost/pause:x", StateDir: "/var/lib/cri-compose",
	Capabilities: []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_KILL", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE", "CAP_SETUID", "CAP_SETGID"},
}

// inside reports whether path is dir or below it.
func inside(dir, path string) bool {
	r, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsAbs(path) && r != ".." && !strings.HasPrefix(r, "../")
}

func hostileSandbox() *runtime.PodSandboxConfig {
	return &runtime.PodSandboxConfig{
		Metadata:     &runtime.PodSandboxMetadata{Name: "../../etc", Namespace: "a\nservices:\n  evil: {image: x}", Uid: "$(id)", Attempt: 3},
		Hostname:     "h\nprivileged: true",
		LogDirectory: "/var/log/pods/ns_pod_uid/../../../etc",
		DnsConfig:    &runtime.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"a\nnameserver 6.6.6.6"}, Options: []string{"ndots:5"}},
		Labels:       map[string]string{LabelConfigFiles: "/etc/passwd", "x": "${HOME}"},
		Linux:        &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{Privileged: false}},
	}
}

func hostileContainer() *runtime.ContainerConfig {
	return &runtime.ContainerConfig{
		Metadata:   &runtime.ContainerMetadata{Name: "pod", Attempt: 1},
		Image:      &runtime.ImageSpec{Image: "busybox"},
		Command:    []string{"sh", "-c", "echo ${X:?boom} $$ $(id)"},
		Args:       []string{"\nservices:\n  evil:\n    privileged: true"},
		WorkingDir: "/tmp/${PWD}",
		Envs:       []*runtime.KeyValue{{Key: "A", Value: []byte("$B\n")}, {Key: "BIN", Value: []byte{0xff, '$', 0}}},
		Labels: map[string]string{
			LabelLogPath: "/etc/shadow", LabelType: TypeSandbox, LabelProject: "other", LabelWorkingDir: "/etc",
			LabelOneoff: "True", LabelPodNamespace: "kube-system", "ok": "$HOME",
		},
		LogPath: "../../../etc/cron.d/x",
		Linux: &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{
			Capabilities: &runtime.Capability{AddCapabilities: []string{"ALL", "SYS_ADMIN", "net_admin"}},
		}},
	}
}

// unmarshal decodes a request as the gRPC server does, but without the
// fields this CRI version does not know (which the labels do not keep).
func unmarshal(b []byte, m proto.Message) error {
	return proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}

// FuzzValidateSandbox feeds RunPodSandbox configs, as raw protobuf, to
// ValidateSandbox and SandboxSpec.
func FuzzValidateSandbox(f *testing.F) {
	for _, c := range []*runtime.PodSandboxConfig{testSandbox(), hostileSandbox(), {}, {Metadata: &runtime.PodSandboxMetadata{}}} {
		b, _ := proto.Marshal(c)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := &runtime.PodSandboxConfig{}
		if unmarshal(data, cfg) != nil {
			return
		}
		if ValidateSandbox(cfg) != nil {
			return
		}
		spec, err := SandboxSpec(cfg, fuzzHost)
		if err != nil {
			return
		}
		project := ProjectName(cfg.GetMetadata())
		checkName(t, "project", project, 63)
		checkSpecPaths(t, spec, project)
		if spec.HostConfig.Privileged || len(spec.HostConfig.CapAdd) > 0 {
			t.Fatalf("infra container is privileged or has capabilities: %v %v", spec.HostConfig.Privileged, spec.HostConfig.CapAdd)
		}
		checkLabelsRoundTrip(t, spec, cfg)
		checkComposeFile(t, project, spec)
	})
}

// FuzzValidateContainer feeds CreateContainer configs, as raw protobuf,
// with a valid pod or a fuzzed one, to ValidateContainer and ContainerSpec.
func FuzzValidateContainer(f *testing.F) {
	priv := testSandbox()
	priv.Linux = &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{Privileged: true}}
	privCtr := testContainer()
	privCtr.Linux = &runtime.LinuxContainerConfig{SecurityContext: &runtime.LinuxContainerSecurityContext{Privileged: true}}
	for _, p := range []struct {
		sb *runtime.PodSandboxConfig
		c  *runtime.ContainerConfig
	}{{testSandbox(), testContainer()}, {hostileSandbox(), hostileContainer()}, {testSandbox(), hostileContainer()}, {priv, privCtr}, {priv, hostileContainer()}} {
		sb, _ := proto.Marshal(p.sb)
		c, _ := proto.Marshal(p.c)
		f.Add(sb, c)
	}
	f.Fuzz(func(t *testing.T, sbData, ctrData []byte) {
		sb, cfg := &runtime.PodSandboxConfig{}, &runtime.ContainerConfig{}
		if unmarshal(sbData, sb) != nil || unmarshal(ctrData, cfg) != nil {
			return
		}
		if ValidateContainer(cfg) != nil || ValidateSandbox(sb) != nil {
			return
		}
		in := ContainerInput{SandboxID: testSandboxID, Sandbox: sb, Config: cfg, ImageID: testImageID, ImageRef: cfg.GetImage().GetImage(), SeccompProfile: []byte(`{}`)}
		spec, err := ContainerSpec(in, fuzzHost)
		if err != nil {
			return
		}
		project := ProjectName(sb.GetMetadata())
		checkSpecPaths(t, spec, project)
		l := spec.Config.Labels
		if p := l[LabelLogPath]; p != "" && !inside(sb.GetLogDirectory(), p) {
			t.Fatalf("log path %q is outside the log directory %q", p, sb.GetLogDirectory())
		}
		if want, _ := LogPath(sb, cfg); l[LabelLogPath] != want {
			t.Fatalf("log path label %q, want %q (a request label?)", l[LabelLogPath], want)
		}
		for k, want := range map[string]string{LabelType: TypeContainer, LabelSandboxID: testSandboxID, LabelProject: project,
			LabelService: ServiceName(cfg.GetMetadata().GetName()), LabelOneoff: "False", LabelPodNamespace: sb.GetMetadata().GetNamespace()} {
			if l[k] != want {
				t.Fatalf("label %s = %q, want %q", k, l[k], want)
			}
		}
		for k, v := range cfg.GetLabels() {
			if reservedLabel(k) && l[k] == v && k != LabelOneoff && k != LabelType && k != LabelProject && k != LabelService &&
				k != LabelWorkingDir && k != LabelConfigFiles && k != LabelNumber && k != LabelVersion && k != LabelDependsOn {
				t.Fatalf("request label %s=%q reached the engine", k, v)
			}
		}
		hc := spec.HostConfig
		asked := cfg.GetLinux().GetSecurityContext().GetPrivileged()
		if !asked {
			if hc.Privileged || slices.Contains(hc.SecurityOpt, "systempaths=unconfined") || len(hc.DeviceCgroupRules) > 0 {
				t.Fatalf("privileged without asking: %v %v %v", hc.Privileged, hc.SecurityOpt, hc.DeviceCgroupRules)
			}
			for _, c := range hc.CapAdd {
				if !slices.Contains(fuzzHost.Capabilities, c) {
					t.Fatalf("capability %s added, which the host lacks", c)
				}
			}
		} else if !sb.GetLinux().GetSecurityContext().GetPrivileged() {
			t.Fatalf("privileged container in a pod that is not privileged")
		}
		checkLabelsRoundTrip(t, spec, cfg)
		checkComposeFile(t, project, spec)
	})
}

// checkSpecPaths: names are valid, and the paths that cri-compose writes
// or names stay in the state dir.
func checkSpecPaths(t *testing.T, spec *Spec, project string) {
	t.Helper()
	if !engineName.MatchString(spec.Name) {
		t.Fatalf("engine name %q is not valid", spec.Name)
	}
	dir := fuzzHost.ProjectDir(project)
	if !inside(filepath.Join(fuzzHost.StateDir, "projects"), dir) || filepath.Dir(dir) != filepath.Join(fuzzHost.StateDir, "projects") {
		t.Fatalf("project folder %q is not directly in the state dir", dir)
	}
	l := spec.Config.Labels
	if l[LabelWorkingDir] != dir || l[LabelConfigFiles] != fuzzHost.ComposeFile(project) {
		t.Fatalf("working dir %q, config files %q: not the project's folder %q", l[LabelWorkingDir], l[LabelConfigFiles], dir)
	}
	for _, b := range spec.HostConfig.Binds {
		if strings.HasSuffix(b, ":/etc/resolv.conf:rprivate") && strings.HasPrefix(b, fuzzHost.StateDir) && !strings.HasPrefix(b, fuzzHost.ResolvConfPath(project)+":") {
			t.Fatalf("resolv.conf bind %q is not the project's", b)
		}
	}
}

// checkLabelsRoundTrip: what the labels say is what was asked (the
// engine is the runtime's database).
func checkLabelsRoundTrip(t *testing.T, spec *Spec, want proto.Message) {
	t.Helper()
	obj, ours, err := ParseLabels(spec.Config.Labels)
	if !ours || err != nil {
		t.Fatalf("labels do not parse back: %v %v", ours, err)
	}
	var got proto.Message = obj.Sandbox
	if obj.Container != nil {
		got = obj.Container
	}
	if !proto.Equal(got, want) {
		t.Fatalf("config from the labels differs from the request")
	}
}

// checkComposeFile renders the spec's project and checks the file has
// exactly the services and top-level keys it should, and loads in Compose.
func checkComposeFile(t *testing.T, project string, spec *Spec) {
	t.Helper()
	services := []types.ServiceConfig{Service(InfraService, spec.Config, spec.HostConfig)}
	if spec.Service != InfraService {
		services = []types.ServiceConfig{infraService(), Service(spec.Service, spec.Config, spec.HostConfig)}
	}
	b, err := ComposeYAML(Project(project, fuzzHost.Network, services...))
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the compose file is not YAML: %v\n%s", err, b)
	}
	for k := range doc {
		if k != "services" && k != "networks" {
			t.Fatalf("top-level key %q in the compose file\n%s", k, b)
		}
	}
	svcs, _ := doc["services"].(map[string]any)
	var names []string
	for k := range svcs {
		names = append(names, k)
	}
	slices.Sort(names)
	want := []string{InfraService}
	if spec.Service != InfraService {
		want = append(want, spec.Service)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("services %v in the compose file, want %v\n%s", names, want, b)
	}
	for name, v := range svcs {
		if m, _ := v.(map[string]any); m["privileged"] == true && !spec.HostConfig.Privileged {
			t.Fatalf("service %s privileged in the compose file of an unprivileged container\n%s", name, b)
		}
	}
}

// infraService stands for the pod's infra container beside a fuzzed one.
func infraService() types.ServiceConfig {
	return Service(InfraService, &container.Config{Image: fuzzHost.InfraImage, Labels: map[string]string{}},
		&container.HostConfig{NetworkMode: container.NetworkMode(fuzzHost.Network)})
}

// FuzzComposeYAML renders containers whose command, arguments,
// environment, labels, working dir and name come from a request, and
// loads the file with Compose's own loader (compose-go, as `docker
// compose` does): it must load, name the one service, and give back every
// value as asked: nothing interpolated, nothing injected.
func FuzzComposeYAML(f *testing.F) {
	f.Add("sh", "-c", "A", "1", "tier", "front", "/work", "app")
	f.Add("echo ${X:?boom}", "$$HOME $(id)", "PATH", "${PATH}:/x", "l", "${HOME}", "/tmp/$PWD", "pod")
	f.Add("a\nservices:\n  evil: {}", "\n\"privileged\": true", "K", "v\nprivileged: true", "k: v", "- x", "~", "services")
	f.Add("", "", "e", "", "", "", "", "")
	f.Add("'", "\"", "x-y.z", "\t", "com.example/x", "{a: b}", "relative/dir", "-leading")
	f.Add("", "", "0", "$A\x9c", "0", "", "", "0") // not UTF-8, so base64: its '$' still escaped
	f.Fuzz(func(t *testing.T, cmd, arg, envKey, envVal, labelKey, labelVal, workDir, name string) {
		cfg := testContainer()
		cfg.Metadata.Name = name
		cfg.Command, cfg.Args = []string{cmd}, []string{arg}
		cfg.Envs = []*runtime.KeyValue{{Key: envKey, Value: []byte(envVal)}}
		cfg.Labels = map[string]string{labelKey: labelVal}
		cfg.WorkingDir = workDir
		spec, err := ContainerSpec(testInput(testSandbox(), cfg), fuzzHost)
		if err != nil {
			return
		}
		project := ProjectName(testSandbox().GetMetadata())
		want := Service(spec.Service, spec.Config, spec.HostConfig)
		b, err := ComposeYAML(Project(project, fuzzHost.Network, infraService(), want))
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		dir := "/nonexistent/cri-compose-fuzz"
		p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
			WorkingDir:  dir,
			ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml"), Content: b}},
			Environment: types.Mapping{"X": "set", "HOME": "/root", "PATH": "/bin", "PWD": "/"},
		}, func(o *loader.Options) {
			o.SetProjectName(project, true)
			o.ResolvePaths = false
		})
		if err != nil {
			t.Fatalf("compose-go cannot load the file: %v\n%s", err, b)
		}
		if len(p.Services) != 2 {
			t.Fatalf("%d services loaded, want 2\n%s", len(p.Services), b)
		}
		got, ok := p.Services[spec.Service]
		if !ok {
			t.Fatalf("service %s not loaded\n%s", spec.Service, b)
		}
		if !slices.Equal(got.Entrypoint, want.Entrypoint) || !slices.Equal(got.Command, want.Command) {
			t.Fatalf("entrypoint %q command %q, want %q %q\n%s", got.Entrypoint, got.Command, want.Entrypoint, want.Command, b)
		}
		if got.WorkingDir != want.WorkingDir {
			t.Fatalf("working dir %q, want %q\n%s", got.WorkingDir, want.WorkingDir, b)
		}
		for k, v := range want.Environment {
			if g := got.Environment[k]; g == nil || *g != *v {
				t.Fatalf("environment %s = %v, want %q\n%s", k, g, *v, b)
			}
		}
		for k, v := range want.Labels {
			if got.Labels[k] != v {
				t.Fatalf("label %s = %q, want %q\n%s", k, got.Labels[k], v, b)
			}
		}
		if got.Privileged || len(got.CapAdd) > 0 {
			t.Fatalf("loaded service is privileged or has capabilities\n%s", b)
		}
	})
}
