package sandbox

import (
	"bytes"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Exporting a pod: the compose file cri-compose keeps for a pod runs it on
// this engine, beside cri-compose (an external pod network, host paths of
// kubelet's volumes, cgroups under kubelet's hierarchy). An export is the
// same pod as a project that `docker compose up -d` runs on its own,
// anywhere: ExportMounts says where each bind mount's content goes, the
// caller (which can read the host) decides what each mount becomes, and
// ExportYAML renders the file.

// ExportVolumesDir is the folder, beside the exported compose file, that
// holds the content of the pod's bind mounts.
const ExportVolumesDir = "volumes"

// MountKind is what an export makes of a bind mount.
type MountKind int

const (
	// MountHostPath keeps the bind of the host path: what cannot be
	// shipped (a socket, a device, too much data, a remote engine's host).
	MountHostPath MountKind = iota
	// MountFiles ships the file or directory beside the compose file, at
	// the mount's Path, and binds that relative path.
	MountFiles
	// MountVolume makes an empty (or missing) directory a named volume
	// that starts empty, as the bind did.
	MountVolume
)

// ExportMount is one host path bound into the pod's containers. Several
// binds of one host path (a volume shared by containers) are one
// ExportMount, so they stay shared.
type ExportMount struct {
	Service string // the first service that binds it
	Index   int    // its index in that service's volumes
	Source  string // the host path

	// Path is where a MountFiles mount's file or directory goes,
	// slash-separated and relative to the compose file's folder:
	// volumes/<service>/<index>/<base name of Source>.
	Path string
	// Volume is the named volume of a MountVolume mount: <service>-<index>.
	Volume string

	// Set by the caller from what the host path holds.
	Kind MountKind
	// Note says why a mount stays a host bind, or what was left out of
	// shipped files (special files in a directory). It becomes a comment
	// on the mount in the file and a warning.
	Note string
}

// ExportMounts lists the bind mounts of services (the infra service first,
// then by name), one per host path, each with where its content would go.
// Every one is MountHostPath until the caller decides otherwise.
func ExportMounts(services []types.ServiceConfig) []ExportMount {
	var out []ExportMount
	seen := map[string]bool{}
	for _, s := range sortServices(services) {
		for i, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind || v.Source == "" {
				continue
			}
			src := filepath.Clean(v.Source)
			if seen[src] {
				continue
			}
			seen[src] = true
			base := filepath.Base(src)
			if base == "/" || base == "." || base == ".." {
				base = "root"
			}
			out = append(out, ExportMount{
				Service: s.Name, Index: i, Source: src,
				Path:   path.Join(ExportVolumesDir, s.Name, strconv.Itoa(i), base),
				Volume: s.Name + "-" + strconv.Itoa(i),
			})
		}
	}
	return out
}

// sortServices orders services as an export lists them: the infra service
// first, then by name.
func sortServices(services []types.ServiceConfig) []types.ServiceConfig {
	out := append([]types.ServiceConfig(nil), services...)
	sort.SliceStable(out, func(i, j int) bool {
		if (out[i].Name == InfraService) != (out[j].Name == InfraService) {
			return out[i].Name == InfraService
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// ExportName is the project name an export runs under: the pod's namespace
// and name. It never equals a live pod's project (ProjectName adds a hash),
// so running an export on the engine that runs the pod cannot adopt (and
// recreate) the pod's containers.
func ExportName(md *runtime.PodSandboxMetadata) string {
	name := strings.Trim(sanitize(md.GetNamespace())+"-"+sanitize(md.GetName()), "-_")
	if len(name) > maxProjectName {
		name = strings.TrimRight(name[:maxProjectName], "-_")
	}
	if name == "" {
		return "pod"
	}
	return name
}

// Export is a pod to render as a standalone project.
type Export struct {
	// Name is the exported project's name (ExportName), written as the
	// file's `name:` so that it never depends on the folder's name.
	Name string
	// Pod and SandboxID say where the export came from (a comment).
	Pod       string // namespace/name
	SandboxID string
	// Services are the pod's services as cri-compose renders them
	// (Service): the infra service and one per container.
	Services []types.ServiceConfig
	// Network is cri-compose's pod network, which the export replaces by
	// the project's own default network ("" for a host-network pod).
	Network string
	// Containers maps the CRI container ids of the pod to their services,
	// so that a namespace joined by id (pid: container:<id>) becomes
	// service:<name>.
	Containers map[string]string
	// Mounts are ExportMounts(Services), with what the caller decided.
	Mounts []ExportMount
	// InfraBuild, when set, is the build context (relative, e.g.
	// "./pause") from which the infra image is built where it is missing:
	// cri-compose's built-in pause image is in no registry.
	InfraBuild string
}

// exportNetwork is the network the pod joins in an export: Compose's
// default network of the project, made by `docker compose up` and removed
// by `down`.
const exportNetwork = "default"

// ExportProject turns the pod's services into the standalone project:
//   - the pod network becomes the project's own (not external) network; a
//     host-network pod stays on the host's;
//   - joins of another container's namespaces by id become service:<name>
//     (or are left out, with a warning, when that container is not in the
//     pod);
//   - bind mounts become what Mounts say;
//   - cgroup_parent is left out (it names kubelet's cgroup hierarchy of
//     this node), and so are labels of cri-compose's own (Service drops
//     them already);
//   - images stay as named; the infra image gets InfraBuild.
//
// warnings say what was not exported as it was, one sentence each;
// comments holds the notes of mounts by where they go in the file,
// "<service>/<volume index>" (a host path bound by two services has its
// note on both binds, and one warning).
func ExportProject(e Export) (p *types.Project, comments map[string]string, warnings []string, err error) {
	if e.Name == "" {
		return nil, nil, nil, fmt.Errorf("export: %w: project name is required", ErrInvalid)
	}
	comments = map[string]string{}
	mounts := map[string]ExportMount{}
	for _, m := range e.Mounts {
		mounts[m.Source] = m
	}
	var services []types.ServiceConfig
	volumes := types.Volumes{}
	hostNet := false
	for _, s := range sortServices(e.Services) {
		s = exportService(s)
		if s.Name == InfraService {
			hostNet = s.NetworkMode == "host"
			if e.InfraBuild != "" {
				s.Build = &types.BuildConfig{Context: e.InfraBuild}
			}
		}
		for _, mode := range []*string{&s.NetworkMode, &s.Ipc, &s.Pid} {
			id, ok := strings.CutPrefix(*mode, "container:")
			if !ok {
				continue
			}
			if svc, ok := e.Containers[id]; ok {
				*mode = "service:" + svc
				continue
			}
			warnings = append(warnings, fmt.Sprintf("service %s joined the namespaces of container %.12s, which is not in the pod: left out", s.Name, id))
			*mode = ""
		}
		if len(s.Networks) > 0 {
			nets := map[string]*types.ServiceNetworkConfig{}
			for name, cfg := range s.Networks {
				if name == e.Network {
					name = exportNetwork
				}
				nets[name] = cfg
			}
			s.Networks = nets
		}
		if len(s.Volumes) > 0 {
			s.Volumes = append([]types.ServiceVolumeConfig(nil), s.Volumes...)
		}
		for i := range s.Volumes {
			v := &s.Volumes[i]
			if v.Type != types.VolumeTypeBind {
				continue
			}
			m, ok := mounts[filepath.Clean(v.Source)]
			if !ok {
				continue
			}
			bind := *v
			switch m.Kind {
			case MountFiles:
				v.Source = "./" + m.Path
				v.Bind = nil // a plain folder beside the file: no propagation
			case MountVolume:
				v.Type = types.VolumeTypeVolume
				v.Source = m.Volume
				v.Bind = nil
				// Starts empty, as the bound directory did, instead of
				// taking a copy of the image's content at the target.
				v.Volume = &types.ServiceVolumeVolume{NoCopy: true}
				volumes[m.Volume] = types.VolumeConfig{}
			}
			if m.Note == "" {
				continue
			}
			comments[s.Name+"/"+strconv.Itoa(i)] = m.Note
			if s.Name == m.Service && i == m.Index {
				warnings = append(warnings, fmt.Sprintf("service %s, volume %s:%s: %s", s.Name, bind.Source, bind.Target, m.Note))
			}
		}
		services = append(services, s)
	}
	network := e.Network
	if hostNet {
		network = ""
	}
	p = Project(e.Name, "", services...)
	if network != "" {
		p.Networks = types.Networks{exportNetwork: types.NetworkConfig{}}
	}
	if len(volumes) > 0 {
		p.Volumes = volumes
	}
	return p, comments, warnings, nil
}

// exportService copies what an export changes of a service.
func exportService(s types.ServiceConfig) types.ServiceConfig {
	s.CgroupParent = ""
	if len(s.Labels) > 0 {
		l := types.Labels{}
		for k, v := range s.Labels {
			if !strings.HasPrefix(k, "io.cri-compose.") {
				l[k] = v
			}
		}
		s.Labels = l
		if len(l) == 0 {
			s.Labels = nil
		}
	}
	return s
}

// ExportYAML renders the export: ComposeYAML's file (every '$' of a value
// escaped) with the project's `name:` first, a comment at its head saying
// where it comes from and what was not exported as it was, and a comment on
// each mount that was not shipped as it was. warnings are those notes, one
// sentence each.
func ExportYAML(e Export) (b []byte, warnings []string, err error) {
	p, comments, warnings, err := ExportProject(e)
	if err != nil {
		return nil, nil, err
	}
	body, err := ComposeYAML(p)
	if err != nil {
		return nil, nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return nil, nil, fmt.Errorf("export %s: %w", e.Name, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("export %s: the compose file is not a mapping", e.Name)
	}
	top := doc.Content[0]
	top.Content = append([]*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "name"},
		{Kind: yaml.ScalarNode, Value: e.Name},
	}, top.Content...)
	for k, note := range comments {
		svc, idx, _ := strings.Cut(k, "/")
		i, _ := strconv.Atoi(idx)
		if v := mapPath(top, "services", svc, "volumes"); v != nil && v.Kind == yaml.SequenceNode && i < len(v.Content) {
			v.Content[i].HeadComment = commentLines([]string{note})
		}
	}
	head := []string{
		fmt.Sprintf("Pod %s (sandbox %.12s), exported by cri-compose.", e.Pod, e.SandboxID),
		"Run it with `docker compose up -d` in this folder.",
	}
	if len(warnings) > 0 {
		head = append(head, "Not exported as it was:")
		for _, w := range warnings {
			head = append(head, "- "+w)
		}
	}
	doc.HeadComment = commentLines(head)

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, nil, fmt.Errorf("export %s: %w", e.Name, err)
	}
	return buf.Bytes(), warnings, nil
}

// mapPath follows mapping keys from n; nil when one is missing.
func mapPath(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// commentLines makes YAML comment text of lines (newlines inside a line
// would end the comment).
func commentLines(lines []string) string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = "# " + strings.ReplaceAll(l, "\n", " ")
	}
	return strings.Join(out, "\n")
}
