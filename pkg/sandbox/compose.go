package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/moby/api/types/container"
	"go.yaml.in/yaml/v4"
)

// Service renders an engine container (as created, or as inspected after a
// restart) as the Compose service that describes it. Namespace joins with
// the infra container become `service:pod`, so the file stands on its own.
func Service(service string, cc *container.Config, hc *container.HostConfig) types.ServiceConfig {
	s := types.ServiceConfig{Name: service}
	if cc == nil {
		cc = &container.Config{}
	}
	if hc == nil {
		hc = &container.HostConfig{}
	}
	s.Image = cc.Image
	if ref := cc.Labels[LabelImage]; ref != "" {
		s.Image = ref // the name, not the pinned id: the file must run elsewhere
	}
	s.Entrypoint = types.ShellCommand(cc.Entrypoint)
	s.Command = types.ShellCommand(cc.Cmd)
	s.WorkingDir = cc.WorkingDir
	s.User = cc.User
	s.Tty = cc.Tty
	s.StdinOpen = cc.OpenStdin
	if len(cc.Env) > 0 {
		s.Environment = types.MappingWithEquals{}
		for _, kv := range cc.Env {
			k, v, _ := strings.Cut(kv, "=")
			s.Environment[k] = &v
		}
	}
	if service == InfraService {
		s.Hostname = cc.Hostname
	}
	s.Labels = userLabels(cc.Labels)

	s.NetworkMode = joinMode(string(hc.NetworkMode), cc.Labels[LabelSandboxID])
	s.Ipc = joinMode(string(hc.IpcMode), cc.Labels[LabelSandboxID])
	s.Pid = joinMode(string(hc.PidMode), cc.Labels[LabelSandboxID])
	if s.NetworkMode != "" && !strings.Contains(s.NetworkMode, ":") && s.NetworkMode != "host" && s.NetworkMode != "none" {
		// A user-defined network: listed under networks, not network_mode.
		s.Networks = map[string]*types.ServiceNetworkConfig{s.NetworkMode: nil}
		s.NetworkMode = ""
	}
	for _, d := range hc.DNS {
		s.DNS = append(s.DNS, d.String())
	}
	s.DNSSearch = hc.DNSSearch
	s.DNSOpts = hc.DNSOptions
	if len(hc.Sysctls) > 0 {
		s.Sysctls = types.Mapping(hc.Sysctls)
	}
	for port, bindings := range hc.PortBindings {
		for _, b := range bindings {
			p := types.ServicePortConfig{Target: uint32(port.Num()), Published: b.HostPort, Protocol: string(port.Proto()), Mode: "ingress"}
			if b.HostIP.IsValid() {
				p.HostIP = b.HostIP.String()
			}
			s.Ports = append(s.Ports, p)
		}
	}
	sort.Slice(s.Ports, func(i, j int) bool {
		if s.Ports[i].Target != s.Ports[j].Target {
			return s.Ports[i].Target < s.Ports[j].Target
		}
		return s.Ports[i].Protocol+s.Ports[i].HostIP < s.Ports[j].Protocol+s.Ports[j].HostIP
	})
	for _, b := range hc.Binds {
		s.Volumes = append(s.Volumes, bindVolume(b))
	}
	for _, m := range hc.Mounts {
		v := types.ServiceVolumeConfig{Type: string(m.Type), Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly}
		switch bo := m.BindOptions; {
		case bo == nil:
		case bo.ReadOnlyForceRecursive:
			v.Bind = &types.ServiceVolumeBind{Recursive: "readonly"}
		case bo.ReadOnlyNonRecursive:
			// Compose's word for a read-only top over writable submounts.
			v.Bind = &types.ServiceVolumeBind{Recursive: "writable", Propagation: string(bo.Propagation), CreateHostPath: types.OptOut(bo.CreateMountpoint)}
		}
		s.Volumes = append(s.Volumes, v)
	}
	for _, d := range hc.Devices {
		s.Devices = append(s.Devices, types.DeviceMapping{Source: d.PathOnHost, Target: d.PathInContainer, Permissions: d.CgroupPermissions})
	}
	// CDI devices as Compose writes them: the qualified name as both
	// source and target, which `docker compose up` turns back into a cdi
	// device request.
	for _, r := range hc.DeviceRequests {
		if r.Driver == "cdi" {
			for _, id := range r.DeviceIDs {
				s.Devices = append(s.Devices, types.DeviceMapping{Source: id, Target: id})
			}
		}
	}
	s.CapAdd = hc.CapAdd
	s.CapDrop = hc.CapDrop
	s.Privileged = hc.Privileged
	s.ReadOnly = hc.ReadonlyRootfs
	s.GroupAdd = hc.GroupAdd
	s.SecurityOpt = hc.SecurityOpt
	if !hc.Privileged && hc.MaskedPaths != nil && len(hc.MaskedPaths) == 0 && hc.ReadonlyPaths != nil && len(hc.ReadonlyPaths) == 0 {
		// Nothing masked or read-only (emulated privileged): Compose's
		// spelling of the engine's empty MaskedPaths and ReadonlyPaths.
		s.SecurityOpt = append(append([]string(nil), hc.SecurityOpt...), "systempaths=unconfined")
	}
	s.DeviceCgroupRules = hc.DeviceCgroupRules
	s.CgroupParent = hc.CgroupParent
	s.CPUShares = hc.CPUShares
	s.CPUQuota = hc.CPUQuota
	s.CPUPeriod = hc.CPUPeriod
	s.CPUSet = hc.CpusetCpus
	s.MemLimit = types.UnitBytes(hc.Memory)
	if hc.MemorySwap > 0 {
		s.MemSwapLimit = types.UnitBytes(hc.MemorySwap)
	}
	s.OomScoreAdj = int64(hc.OomScoreAdj)
	if hc.LogConfig.Type != "" {
		s.Logging = &types.LoggingConfig{Driver: hc.LogConfig.Type, Options: types.Options(hc.LogConfig.Config)}
	}
	s.Restart = types.RestartPolicyNo
	// No depends_on: network_mode/ipc/pid "service:pod" already orders the
	// services for Compose, and v1 rejects v2's depends_on `required` key.
	return s
}

// joinMode turns "container:<infra id>" into Compose's "service:pod".
func joinMode(mode, sandboxID string) string {
	if sandboxID != "" && mode == "container:"+sandboxID {
		return "service:" + InfraService
	}
	if mode == "private" {
		return "" // the engine's default
	}
	// "shareable" stays: engines default to private IPC since 20.10, and a
	// service that joins with `ipc: service:pod` fails on a private one.
	return mode
}

func bindVolume(b string) types.ServiceVolumeConfig {
	parts := strings.SplitN(b, ":", 3)
	v := types.ServiceVolumeConfig{Type: types.VolumeTypeBind, Source: parts[0]}
	if len(parts) > 1 {
		v.Target = parts[1]
	}
	if len(parts) > 2 {
		for _, o := range strings.Split(parts[2], ",") {
			switch o {
			case "ro":
				v.ReadOnly = true
			case "rslave", "rshared", "rprivate", "slave", "shared", "private":
				if o != "rprivate" {
					// The engine creates a missing source of a bind, so does Compose.
					v.Bind = &types.ServiceVolumeBind{Propagation: o, CreateHostPath: true}
				}
			}
		}
	}
	return v
}

// userLabels are the labels a person put on the pod or container: the ones
// cri-compose and Compose manage are left out of the file (Compose adds its
// own when it runs it; ours only mean something to cri-compose).
func userLabels(l map[string]string) types.Labels {
	out := types.Labels{}
	for k, v := range l {
		if strings.HasPrefix(k, "com.docker.compose.") || strings.HasPrefix(k, "io.cri-compose.") {
			continue
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// ConfigHash is the com.docker.compose.config-hash of a service: a digest of
// its rendered configuration, as Compose computes one to detect drift.
func ConfigHash(s types.ServiceConfig) string {
	b, _ := json.Marshal(s) // a ServiceConfig always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Project assembles a pod's compose project from its services. The pod
// network is external: cri-compose owns it, not the project.
func Project(name, network string, services ...types.ServiceConfig) *types.Project {
	p := &types.Project{Name: name, Services: types.Services{}}
	for _, s := range services {
		p.Services[s.Name] = s
	}
	if network != "" {
		p.Networks = types.Networks{network: types.NetworkConfig{Name: network, External: true}}
	}
	p.Volumes = externalVolumes(services) // stage.go
	return p
}

// ComposeYAML renders a project as a compose file. The file has no `name`:
// Compose v1 rejects the key, and both versions take the project name from
// the folder, which is named after the project.
//
// Compose interpolates every value of the file, so a '$' from a request (a
// shell command, an environment value, a label) is written as '$$': it
// reaches the container as asked, and "${X:?}" cannot make the file
// unloadable.
func ComposeYAML(p *types.Project) ([]byte, error) {
	unnamed := *p
	unnamed.Name = ""
	b, err := unnamed.MarshalYAML()
	if err != nil {
		return nil, fmt.Errorf("render compose file of %s: %w", p.Name, err)
	}
	listify := extensionKeys(p)
	// A value that is not UTF-8 is written as base64 (!!binary), which
	// hides its '$' from the check below.
	if !listify && !bytes.Contains(b, []byte("$")) && !bytes.Contains(b, []byte("!!binary")) && !tabIndented(b) {
		return b, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		// go-yaml writes some strings (a blank line, then one starting
		// with a tab) as block scalars it cannot read back, nor can
		// Compose (found by FuzzValidateContainer): start again from the
		// JSON form, in which every string is quoted.
		j, jerr := unnamed.MarshalJSON()
		if jerr != nil {
			return nil, fmt.Errorf("render compose file of %s: %w", p.Name, jerr)
		}
		doc = yaml.Node{}
		if jerr := yaml.Unmarshal(j, &doc); jerr != nil {
			return nil, fmt.Errorf("render compose file of %s: %w (and from JSON: %v)", p.Name, err, jerr)
		}
		blockStyle(&doc)
		if root := doc.Content; len(root) == 1 && root[0].Kind == yaml.MappingNode {
			// No name: Compose v1 refuses the key (see above).
			for i := 0; i+1 < len(root[0].Content); i += 2 {
				if root[0].Content[i].Value == "name" {
					root[0].Content = append(root[0].Content[:i], root[0].Content[i+2:]...)
					break
				}
			}
		}
	}
	if listify {
		listExtensionMaps(&doc)
	}
	escapeDollars(&doc, false)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("render compose file of %s: %w", p.Name, err)
	}
	return buf.Bytes(), nil
}

// tabIndented reports whether a line of b starts, after its indentation,
// with a tab: only a block scalar's content can, and some of those do not
// read back (see ComposeYAML).
func tabIndented(b []byte) bool {
	for i := bytes.IndexByte(b, '\t'); i >= 0; {
		j := i - 1
		for j >= 0 && b[j] == ' ' {
			j--
		}
		if j < 0 || b[j] == '\n' {
			return true
		}
		k := bytes.IndexByte(b[i+1:], '\t')
		if k < 0 {
			break
		}
		i += 1 + k
	}
	return false
}

// blockStyle turns the flow mappings and sequences of a document read from
// JSON into block ones, and its quoted keys into plain ones where they can
// be, the way compose files are written; values stay quoted.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style &^= yaml.FlowStyle
	}
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && c.Kind == yaml.ScalarNode {
			c.Style = 0 // the encoder quotes a key that needs it
		}
		blockStyle(c)
	}
}

// extensionKeys reports whether a service has an environment variable,
// label or sysctl named "x-…": in a mapping, Compose takes such a key for
// an extension field and drops it when it loads the file (found by
// FuzzComposeYAML).
func extensionKeys(p *types.Project) bool {
	for _, s := range p.Services {
		for k := range s.Environment {
			if strings.HasPrefix(k, "x-") {
				return true
			}
		}
		for k := range s.Labels {
			if strings.HasPrefix(k, "x-") {
				return true
			}
		}
		for k := range s.Sysctls {
			if strings.HasPrefix(k, "x-") {
				return true
			}
		}
	}
	return false
}

// listExtensionMaps rewrites every service's environment, labels or
// sysctls mapping that holds an "x-" key as a list of KEY=value items,
// which Compose reads whole (see extensionKeys).
func listExtensionMaps(doc *yaml.Node) {
	root := doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	services := mappingValue(root, "services")
	if services == nil || services.Kind != yaml.MappingNode {
		return
	}
	for i := 1; i < len(services.Content); i += 2 {
		svc := services.Content[i]
		if svc.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(svc.Content); j += 2 {
			switch svc.Content[j].Value {
			case "environment", "labels", "sysctls":
			default:
				continue
			}
			m := svc.Content[j+1]
			if m.Kind != yaml.MappingNode {
				continue
			}
			x := false
			for k := 0; k < len(m.Content); k += 2 {
				x = x || strings.HasPrefix(m.Content[k].Value, "x-")
			}
			if !x {
				continue
			}
			seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			for k := 0; k+1 < len(m.Content); k += 2 {
				key, val := m.Content[k], m.Content[k+1]
				item := []byte(key.Value)
				switch val.Tag {
				case "!!null":
				case "!!binary":
					v, _ := base64.StdEncoding.DecodeString(val.Value)
					item = append(append(item, '='), v...)
				default:
					item = append(append(item, '='), val.Value...)
				}
				n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: string(item)}
				if !utf8.Valid(item) {
					n.Tag, n.Value = "!!binary", base64.StdEncoding.EncodeToString(item)
				}
				seq.Content = append(seq.Content, n)
			}
			svc.Content[j+1] = seq
		}
	}
}

// mappingValue is the value of key in a mapping node, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// escapeDollars doubles '$' in every scalar value; mapping keys are left
// alone, as Compose does not interpolate them.
func escapeDollars(n *yaml.Node, key bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		if key {
			return
		}
		if n.Tag == "!!binary" { // a value that is not UTF-8, as base64
			if b, err := base64.StdEncoding.DecodeString(n.Value); err == nil {
				n.Value = base64.StdEncoding.EncodeToString(bytes.ReplaceAll(b, []byte("$"), []byte("$$")))
			}
			return
		}
		n.Value = strings.ReplaceAll(n.Value, "$", "$$")
	case yaml.MappingNode:
		for i, c := range n.Content {
			escapeDollars(c, i%2 == 0)
		}
	default:
		for _, c := range n.Content {
			escapeDollars(c, false)
		}
	}
}

// SetConfigHash stamps a spec with the config hash of the service it is.
func (s *Spec) SetConfigHash() {
	s.Config.Labels[LabelConfigHash] = ConfigHash(Service(s.Service, s.Config, s.HostConfig))
}
