package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// exportCase is a testdata/<case>.export.json file: what pkg/cri found at
// the host paths of testdata/<case>.pod.json, the rest of an export's input.
type exportCase struct {
	Comment    string `json:"comment"`
	InfraBuild string `json:"infraBuild"`
	Mounts     map[string]struct {
		Kind string `json:"kind"` // files, volume or host
		Note string `json:"note"`
	} `json:"mounts"`
}

// testContainerID is the id the export golden cases give container i of a
// pod (the engine would pick one).
func testContainerID(i int) string { return fmt.Sprintf("c%063x", i+1) }

// renderExport exports a golden case the way pkg/cri does.
func renderExport(t *testing.T, name string) (Export, []byte, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".export.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ec exportCase
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ec); err != nil {
		t.Fatalf("%s.export.json: %v", name, err)
	}
	sb, ctrs, h := loadCase(t, name)
	specs, _, _ := render(t, sb, ctrs, h)
	e := Export{
		Name: ExportName(sb.GetMetadata()), Pod: sb.GetMetadata().GetNamespace() + "/" + sb.GetMetadata().GetName(),
		SandboxID: testSandboxID, Containers: map[string]string{}, InfraBuild: ec.InfraBuild,
	}
	for i, s := range specs {
		e.Services = append(e.Services, Service(s.Service, s.Config, s.HostConfig))
		if i > 0 {
			e.Containers[testContainerID(i-1)] = s.Service
		}
	}
	if specs[0].HostConfig.NetworkMode != "host" {
		e.Network = h.Network
	}
	e.Mounts = ExportMounts(e.Services)
	used := map[string]bool{}
	for i, m := range e.Mounts {
		found, ok := ec.Mounts[m.Source]
		if !ok {
			t.Fatalf("%s.export.json says nothing of the host path %s", name, m.Source)
		}
		used[m.Source] = true
		switch found.Kind {
		case "files":
			e.Mounts[i].Kind = MountFiles
		case "volume":
			e.Mounts[i].Kind = MountVolume
		case "host":
			e.Mounts[i].Kind = MountHostPath
		default:
			t.Fatalf("%s.export.json: %s: kind %q", name, m.Source, found.Kind)
		}
		e.Mounts[i].Note = found.Note
	}
	for src := range ec.Mounts {
		if !used[src] {
			t.Errorf("%s.export.json names %s, which the pod does not mount", name, src)
		}
	}
	yml, warnings, err := ExportYAML(e)
	if err != nil {
		t.Fatalf("ExportYAML: %v", err)
	}
	return e, yml, warnings
}

func exportCases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.export.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".export.json"))
	}
	sort.Strings(names)
	if len(names) == 0 {
		t.Fatal("no testdata/*.export.json")
	}
	return names
}

// TestExportGolden renders testdata/<case>.export.yaml (-update rewrites
// it) and checks, with compose-go's loader as `docker compose` loads it,
// what an export must be to run on its own.
func TestExportGolden(t *testing.T) {
	for _, name := range exportCases(t) {
		t.Run(name, func(t *testing.T) {
			e, yml, warnings := renderExport(t, name)
			checkGolden(t, filepath.Join("testdata", name+".export.yaml"), yml)
			if _, yml2, _ := renderExport(t, name); !bytes.Equal(yml, yml2) {
				t.Error("two renderings of the export differ")
			}
			for _, w := range warnings {
				if !strings.Contains(string(yml), w) {
					t.Errorf("warning %q is not in the file's head comment", w)
				}
			}

			got := loadCompose(t, e.Name, yml, func(o *loader.Options) { o.SetProjectName("", false) })
			if got.Name != e.Name {
				t.Errorf("the file's project name is %q, want %q", got.Name, e.Name)
			}
			if len(got.Services) != len(e.Services) {
				t.Fatalf("loaded %d services, want %d", len(got.Services), len(e.Services))
			}
			for _, n := range got.Networks {
				if bool(n.External) {
					t.Errorf("network %+v is external: an export makes its own", n)
				}
			}
			for _, want := range e.Services {
				g := got.Services[want.Name]
				// Unchanged: what the pod runs.
				for field, pair := range map[string][2]any{
					"image": {want.Image, g.Image}, "entrypoint": {want.Entrypoint, g.Entrypoint},
					"command": {want.Command, g.Command}, "environment": {want.Environment, g.Environment},
					"ports": {len(want.Ports), len(g.Ports)}, "mem_limit": {want.MemLimit, g.MemLimit},
					"cpu_quota": {want.CPUQuota, g.CPUQuota}, "user": {want.User, g.User},
					"sysctls": {len(want.Sysctls), len(g.Sysctls)},
				} {
					a, _ := json.Marshal(pair[0])
					b, _ := json.Marshal(pair[1])
					if string(a) != string(b) && !(string(a) == "null" && (string(b) == "{}" || string(b) == "[]")) {
						t.Errorf("service %s: %s after load = %s, want %s", want.Name, field, b, a)
					}
				}
				if g.CgroupParent != "" {
					t.Errorf("service %s keeps cgroup_parent %s", want.Name, g.CgroupParent)
				}
				for k := range g.Labels {
					if strings.HasPrefix(k, "io.cri-compose.") {
						t.Errorf("service %s keeps label %s", want.Name, k)
					}
				}
				for _, mode := range []string{g.NetworkMode, g.Ipc, g.Pid} {
					if strings.HasPrefix(mode, "container:") {
						t.Errorf("service %s joins %s: an export names services", want.Name, mode)
					}
				}
				for _, v := range g.Volumes {
					if v.Type == types.VolumeTypeBind && !filepath.IsAbs(v.Source) && !strings.HasPrefix(v.Source, "./"+ExportVolumesDir+"/") {
						t.Errorf("service %s: bind source %s is neither a host path nor beside the file", want.Name, v.Source)
					}
				}
			}
		})
	}
}

// TestExportShapes checks the parts of exported.pod.json one by one.
func TestExportShapes(t *testing.T) {
	e, yml, warnings := renderExport(t, "exported")
	p, _, _, err := ExportProject(e)
	if err != nil {
		t.Fatal(err)
	}
	web, debug := p.Services["web"], p.Services["debug"]
	if p.Name != "prod-shop" {
		t.Errorf("project name %q, want prod-shop", p.Name)
	}
	if infra := p.Services[InfraService]; infra.Build == nil || infra.Build.Context != "./pause" || infra.Image == "" {
		t.Errorf("infra service: build %+v image %q; want the ./pause context beside the image's name", infra.Build, infra.Image)
	}
	if _, ok := p.Services[InfraService].Networks["default"]; !ok || len(p.Networks) != 1 || bool(p.Networks["default"].External) {
		t.Errorf("pod network: service %v, project %+v; want the project's own default network", p.Services[InfraService].Networks, p.Networks)
	}
	if debug.Pid != "service:web" {
		t.Errorf("debug joins pid %q, want service:web", debug.Pid)
	}
	if o := p.Services["orphan-join"]; o.Pid != "" {
		t.Errorf("orphan-join joins pid %q of a container not in the pod, want nothing", o.Pid)
	}
	vols := func(s types.ServiceConfig) []string {
		var out []string
		for _, v := range s.Volumes {
			out = append(out, fmt.Sprintf("%s %s:%s ro=%v bind=%v nocopy=%v", v.Type, v.Source, v.Target, v.ReadOnly, v.Bind != nil, v.Volume != nil && v.Volume.NoCopy))
		}
		return out
	}
	wantWeb := []string{
		"bind ./volumes/web/0/site:/srv ro=true bind=false nocopy=false",
		"bind ./volumes/web/1/etc-hosts:/etc/hosts ro=false bind=false nocopy=false",
		"volume debug-0:/cache ro=false bind=false nocopy=true",
		"bind /var/run/docker.sock:/var/run/docker.sock ro=false bind=false nocopy=false",
		"bind /srv/big-data:/data ro=true bind=true nocopy=false",
	}
	if got := vols(web); !slices.Equal(got, wantWeb) {
		t.Errorf("web volumes:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantWeb, "\n"))
	}
	// The emptyDir both bind is one volume, named after the first service
	// (by name) that binds it.
	if got := vols(debug); !slices.Equal(got, []string{"volume debug-0:/cache ro=false bind=false nocopy=true"}) {
		t.Errorf("debug volumes %v: want the volume debug-0 shared with web", got)
	}
	if _, ok := p.Volumes["debug-0"]; !ok || len(p.Volumes) != 1 {
		t.Errorf("project volumes %v, want debug-0", p.Volumes)
	}
	if len(warnings) != 3 {
		t.Errorf("warnings %q: want the orphan join and two host binds", warnings)
	}
	for _, want := range []string{
		"name: prod-shop\n",
		"# a socket cannot be shipped: it still binds the host path\n",
		`PRICE: $$5 $${NOT_INTERPOLATED}`,
	} {
		if !bytes.Contains(yml, []byte(want)) {
			t.Errorf("the file lacks %q", want)
		}
	}

	// ExportMounts numbers each host path once, by the first service that
	// binds it.
	var srcs []string
	for _, m := range e.Mounts {
		srcs = append(srcs, m.Path)
	}
	if want := []string{"volumes/debug/0/cache", "volumes/web/0/site", "volumes/web/1/etc-hosts", "volumes/web/3/docker.sock", "volumes/web/4/big-data"}; !slices.Equal(srcs, want) {
		t.Errorf("ExportMounts paths %v, want %v", srcs, want)
	}

	if _, _, _, err := ExportProject(Export{}); err == nil {
		t.Error("ExportProject without a name: no error")
	}
}
