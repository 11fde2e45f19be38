package sandbox

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
)

// Spec is everything the engine needs to create one container.
type Spec struct {
	Name       string
	Project    string
	Service    string
	Config     *container.Config
	HostConfig *container.HostConfig
	Networking *network.NetworkingConfig
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// ValidateSandbox checks what RunPodSandbox needs before anything is created.
func ValidateSandbox(cfg *runtime.PodSandboxConfig) error {
	md := cfg.GetMetadata()
	switch {
	case cfg == nil:
		return invalid("pod sandbox config is required")
	case md == nil:
		return invalid("pod sandbox metadata is required")
	case md.GetName() == "":
		return invalid("pod sandbox metadata.name is required")
	case md.GetNamespace() == "":
		return invalid("pod sandbox metadata.namespace is required")
	case md.GetUid() == "":
		return invalid("pod sandbox metadata.uid is required")
	}
	if d := cfg.GetLogDirectory(); d != "" && !filepath.IsAbs(d) {
		return invalid("log_directory %q must be an absolute path", d)
	}
	for k := range cfg.GetLinux().GetSysctls() {
		if k == "" || badKey(k) {
			return invalid("sysctl %q is empty or only line breaks", k)
		}
	}
	return nil
}

// SandboxSpec maps a pod sandbox to its infra container: it owns the pod's
// network, IPC and UTS namespaces (and PID when the pod shares one).
func SandboxSpec(cfg *runtime.PodSandboxConfig, h Host) (*Spec, error) {
	if err := ValidateSandbox(cfg); err != nil {
		return nil, err
	}
	md := cfg.GetMetadata()
	project := ProjectName(md)
	raw, err := marshalConfig(cfg)
	if err != nil {
		return nil, err
	}
	labels := composeLabels(project, InfraService, h.ProjectDir(project), h.ComposeFile(project))
	labels[LabelType] = TypeSandbox
	labels[LabelConfig] = raw
	labels[LabelPodName] = md.GetName()
	labels[LabelPodNamespace] = md.GetNamespace()
	labels[LabelPodUID] = md.GetUid()
	labels[LabelContainerName] = "POD"

	nsOpts := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if err := userNamespace(nsOpts); err != nil {
		return nil, err
	}
	hostNet := nsOpts.GetNetwork() == runtime.NamespaceMode_NODE
	cc := &container.Config{
		Image:    h.InfraImage,
		Hostname: cfg.GetHostname(),
		Labels:   labels,
	}
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(h.Network),
		IpcMode:       "shareable",
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// The pause container writes next to nothing; a small readable log
		// keeps `docker compose logs` from warning about the pod service.
		LogConfig: container.LogConfig{Type: "local", Config: map[string]string{"max-size": "64k", "max-file": "1", "compress": "false"}},
		Sysctls:   cfg.GetLinux().GetSysctls(),
	}
	if hostNet {
		hc.NetworkMode = "host"
	}
	if nsOpts.GetIpc() == runtime.NamespaceMode_NODE {
		hc.IpcMode = "host"
	}
	if nsOpts.GetPid() == runtime.NamespaceMode_NODE {
		hc.PidMode = "host"
	}
	if p := cfg.GetLinux().GetCgroupParent(); p != "" {
		hc.CgroupParent = p
	}
	sc := cfg.GetLinux().GetSecurityContext()
	hc.ReadonlyRootfs = sc.GetReadonlyRootfs()
	if err := dnsConfig(cfg.GetDnsConfig(), hc); err != nil {
		return nil, err
	}
	if ResolvConf(cfg.GetDnsConfig()) != nil && !h.StageMounts {
		hc.Binds = append(hc.Binds, h.ResolvConfPath(project)+":/etc/resolv.conf:rprivate")
	}
	if !hostNet {
		if err := portMappings(cfg.GetPortMappings(), cc, hc); err != nil {
			return nil, err
		}
	}
	var nc *network.NetworkingConfig
	if !hostNet {
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			h.Network: {Aliases: aliases(project, cfg.GetHostname())},
		}}
	}
	return &Spec{
		Name: ContainerName(project, InfraService, md.GetAttempt()), Project: project, Service: InfraService,
		Config: cc, HostConfig: hc, Networking: nc,
	}, nil
}

// userNamespace refuses a user namespace of the pod's own (mode POD, with
// kubelet's uid and gid mappings): the engine has one daemon-wide
// remapping (userns-remap) or none, and no way to give one container its
// own mappings. NODE (the host's, the default) is what every container
// gets; CONTAINER and TARGET are invalid for user namespaces.
func userNamespace(ns *runtime.NamespaceOption) error {
	if ns.GetUsernsOptions() == nil {
		return nil // not asked: the host's
	}
	switch ns.GetUsernsOptions().GetMode() {
	case runtime.NamespaceMode_NODE:
		return nil
	case runtime.NamespaceMode_POD:
		return fmt.Errorf("%w: a user namespace per pod (the engine cannot map users per container)", ErrUnsupported)
	}
	return invalid("user namespace mode %s", ns.GetUsernsOptions().GetMode())
}

func aliases(project, hostname string) []string {
	if hostname == "" {
		return []string{project}
	}
	return []string{project, hostname}
}

// ResolvConf is the resolv.conf a pod's DNS config asks for, or nil when it
// asks for nothing. On a user-defined network the engine always writes its
// embedded resolver (127.0.0.11) into the container's resolv.conf, so a pod
// that names its DNS servers gets this file bind-mounted instead, in every
// container of the pod, as kubelet would write it.
func ResolvConf(d *runtime.DNSConfig) []byte {
	if len(d.GetServers()) == 0 && len(d.GetSearches()) == 0 && len(d.GetOptions()) == 0 {
		return nil
	}
	var b strings.Builder
	for _, s := range d.GetServers() {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(d.GetSearches()) > 0 {
		b.WriteString("search " + strings.Join(d.GetSearches(), " ") + "\n")
	}
	if len(d.GetOptions()) > 0 {
		b.WriteString("options " + strings.Join(d.GetOptions(), " ") + "\n")
	}
	return []byte(b.String())
}

func dnsConfig(d *runtime.DNSConfig, hc *container.HostConfig) error {
	for _, s := range d.GetServers() {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return invalid("dns server %q: %v", s, err)
		}
		hc.DNS = append(hc.DNS, a)
	}
	hc.DNSSearch = d.GetSearches()
	hc.DNSOptions = d.GetOptions()
	return nil
}

func portMappings(pms []*runtime.PortMapping, cc *container.Config, hc *container.HostConfig) error {
	for _, pm := range pms {
		proto := "tcp"
		switch pm.GetProtocol() {
		case runtime.Protocol_UDP:
			proto = "udp"
		case runtime.Protocol_SCTP:
			proto = "sctp"
		}
		if pm.GetContainerPort() <= 0 || pm.GetContainerPort() > 65535 {
			return invalid("container port %d out of range", pm.GetContainerPort())
		}
		if pm.GetHostPort() < 0 || pm.GetHostPort() > 65535 {
			return invalid("host port %d out of range", pm.GetHostPort())
		}
		port, err := network.ParsePort(fmt.Sprintf("%d/%s", pm.GetContainerPort(), proto))
		if err != nil {
			return invalid("port mapping: %v", err)
		}
		if cc.ExposedPorts == nil {
			cc.ExposedPorts = network.PortSet{}
		}
		cc.ExposedPorts[port] = struct{}{}
		if pm.GetHostPort() == 0 {
			continue // exposed in the pod, not on the host
		}
		b := network.PortBinding{HostPort: strconv.Itoa(int(pm.GetHostPort()))}
		if ip := pm.GetHostIp(); ip != "" {
			a, err := netip.ParseAddr(ip)
			if err != nil {
				return invalid("host ip %q: %v", ip, err)
			}
			b.HostIP = a
		}
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		hc.PortBindings[port] = append(hc.PortBindings[port], b)
	}
	return nil
}

// ContainerInput is what CreateContainer knows once it has looked things up.
type ContainerInput struct {
	SandboxID string
	Sandbox   *runtime.PodSandboxConfig
	Config    *runtime.ContainerConfig
	ImageID   string // the engine's image id the container is pinned to
	ImageRef  string // the image as requested, normalized
	// SeccompProfile holds a localhost seccomp profile's JSON, read by the
	// caller (this package does no I/O).
	SeccompProfile []byte
	// User is who the container runs as, resolved by the caller from the
	// image's /etc/passwd and /etc/group (ResolveUser); nil leaves it to
	// the engine (run_as_* as given, the engine adds the image's groups).
	User *Identity
	// ImageMounts are the host directories that serve the image volume
	// mounts (Mount.image), by index in Config.Mounts: read-only copies of
	// the images' filesystems, made by the caller (the engine cannot mount
	// an image before API 1.48). An image mount without one is refused as
	// unsupported.
	ImageMounts map[int]string
	// Staged says, by index in Config.Mounts, how each host-path mount
	// reaches an engine that does not share this machine's filesystem
	// (Host.StageMounts; stage.go): the name of the volume holding a copy
	// of the directory, or StagedCopy for a file the caller copies into
	// the container. Unused otherwise.
	Staged map[int]string
}

// ValidateContainer checks a CreateContainer request.
func ValidateContainer(cfg *runtime.ContainerConfig) error {
	switch {
	case cfg == nil:
		return invalid("container config is required")
	case cfg.GetMetadata() == nil:
		return invalid("container metadata is required")
	case cfg.GetMetadata().GetName() == "":
		return invalid("container metadata.name is required")
	case cfg.GetImage().GetImage() == "":
		return invalid("container image is required")
	}
	for k := range cfg.GetLabels() {
		if k == "" || badKey(k) {
			return invalid("container label key %q is empty or only line breaks", k)
		}
	}
	return nil
}

// badKey reports whether a key (of a label, an environment variable or a
// sysctl) is only line breaks: Compose's schema wants keys to match ".+",
// so the compose file could not be loaded (found by FuzzComposeYAML).
func badKey(k string) bool {
	return strings.Trim(k, "\n\r\u2028\u2029") == ""
}

// LogPath is the absolute CRI log path of a container, or "" when the pod
// has no log directory. The path can never leave the log directory.
func LogPath(sb *runtime.PodSandboxConfig, cfg *runtime.ContainerConfig) (string, error) {
	dir, rel := sb.GetLogDirectory(), cfg.GetLogPath()
	if dir == "" || rel == "" {
		return "", nil
	}
	if filepath.IsAbs(rel) {
		return "", invalid("log_path %q must be relative to the log directory", rel)
	}
	p := filepath.Join(dir, rel)
	if r, err := filepath.Rel(dir, p); err != nil || r == "." || r == ".." || strings.HasPrefix(r, "../") {
		return "", invalid("log_path %q leaves the log directory %q", rel, dir)
	}
	return p, nil
}

// ContainerSpec maps a CRI container to a service of its pod's project whose
// container joins the infra container's namespaces.
func ContainerSpec(in ContainerInput, h Host) (*Spec, error) {
	cfg := in.Config
	if err := ValidateContainer(cfg); err != nil {
		return nil, err
	}
	if err := ValidateSandbox(in.Sandbox); err != nil {
		return nil, err
	}
	logPath, err := LogPath(in.Sandbox, cfg)
	if err != nil {
		return nil, err
	}
	md, smd := cfg.GetMetadata(), in.Sandbox.GetMetadata()
	project := ProjectName(smd)
	service := ServiceName(md.GetName())
	raw, err := marshalConfig(cfg)
	if err != nil {
		return nil, err
	}
	labels := composeLabels(project, service, h.ProjectDir(project), h.ComposeFile(project))
	labels[LabelDependsOn] = InfraService + ":service_started:false"
	// CRI labels first, so none of them can overwrite ours; and none in
	// our namespaces or Compose's, which the runtime and Compose trust
	// (a request's io.cri-compose.log-path would say where the log pump,
	// as root, writes).
	for k, v := range cfg.GetLabels() {
		if _, taken := labels[k]; !taken && !reservedLabel(k) {
			labels[k] = v
		}
	}
	labels[LabelType] = TypeContainer
	labels[LabelSandboxID] = in.SandboxID
	labels[LabelConfig] = raw
	labels[LabelImage] = in.ImageRef
	labels[LabelPodName] = smd.GetName()
	labels[LabelPodNamespace] = smd.GetNamespace()
	labels[LabelPodUID] = smd.GetUid()
	labels[LabelContainerName] = md.GetName()
	if logPath != "" {
		labels[LabelLogPath] = logPath
	}

	cc := &container.Config{
		Image:      in.ImageID,
		Entrypoint: cfg.GetCommand(),
		Cmd:        cfg.GetArgs(),
		WorkingDir: cfg.GetWorkingDir(),
		Tty:        cfg.GetTty(),
		OpenStdin:  cfg.GetStdin(),
		StdinOnce:  cfg.GetStdinOnce(),
		Labels:     labels,
	}
	for _, kv := range cfg.GetEnvs() {
		if k, _, eq := strings.Cut(kv.GetKey(), "="); eq {
			// Only the part before '=': what follows may be a value put in
			// the name by mistake, and errors reach logs and traces.
			return nil, invalid("environment variable name %q… holds '='", k)
		}
		if kv.GetKey() == "" || badKey(kv.GetKey()) {
			return nil, invalid("environment variable name %q is empty or only line breaks", kv.GetKey())
		}
		cc.Env = append(cc.Env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	infra := "container:" + in.SandboxID
	hc := &container.HostConfig{
		NetworkMode:   container.NetworkMode(infra),
		IpcMode:       container.IpcMode(infra),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		LogConfig:     h.LogConfig,
	}
	if hc.LogConfig.Type == "" {
		// json-file, not local: Docker 20.10's local driver drops the end
		// of a line the engine split into 16 KiB partial messages (the
		// next line runs into it), and its follow fails on an entry half
		// written ("proto: illegal wireType"); json-file keeps each
		// message's '\n' and a last line without one. The CRI log is
		// written from the attach stream; this log is read back only for
		// output no stream saw (after a restart of cri-compose), and the
		// pump that reads it then holds the container back so that the
		// cap never rotates away what it has not read (pkg/cri/logs.go).
		// That hold is loose: the engine queues about 1 MB of output per stream
		// for an attached reader before the container blocks, and in
		// the log every line costs some 70 bytes more (JSON, stream,
		// time), so for a flood of 13-byte lines the log may run some
		// 9 MiB ahead of the pump. Five files of 4 MiB keep at least
		// 16 MiB past any message (it goes only when the file after its
		// own has been rotated four times); five of 2 MiB lost stretches
		// of such a flood under load, two of 4 MiB pieces of long lines.
		// (A fetch by time reads the whole log: more costs the engine
		// time per fetch.)
		hc.LogConfig = container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "4m", "max-file": "5"}}
	}
	sbNS := in.Sandbox.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if sbNS.GetIpc() == runtime.NamespaceMode_NODE {
		hc.IpcMode = "host"
	}
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if err := userNamespace(ns); err != nil {
		return nil, err
	}
	switch ns.GetPid() {
	case runtime.NamespaceMode_POD:
		hc.PidMode = container.PidMode(infra)
	case runtime.NamespaceMode_NODE:
		hc.PidMode = "host"
	case runtime.NamespaceMode_TARGET:
		if ns.GetTargetId() == "" {
			return nil, invalid("pid namespace TARGET needs a target_id")
		}
		hc.PidMode = container.PidMode("container:" + ns.GetTargetId())
	}
	if p := in.Sandbox.GetLinux().GetCgroupParent(); p != "" {
		hc.CgroupParent = p
	}
	if ResolvConf(in.Sandbox.GetDnsConfig()) != nil && !mountsPath(cfg.GetMounts(), "/etc/resolv.conf") && !h.StageMounts {
		hc.Binds = append(hc.Binds, h.ResolvConfPath(project)+":/etc/resolv.conf:rprivate")
	}
	if err := mounts(cfg.GetMounts(), in.ImageMounts, in.Staged, hc, h); err != nil {
		return nil, err
	}
	for _, d := range cfg.GetDevices() {
		if d.GetHostPath() == "" || d.GetContainerPath() == "" {
			return nil, invalid("device needs host_path and container_path")
		}
		perms := d.GetPermissions()
		if perms == "" {
			perms = "rwm"
		}
		hc.Devices = append(hc.Devices, container.DeviceMapping{PathOnHost: d.GetHostPath(), PathInContainer: d.GetContainerPath(), CgroupPermissions: perms})
	}
	if err := cdiDevices(cfg.GetCDIDevices(), hc, h); err != nil {
		return nil, err
	}
	if err := resources(cfg.GetLinux().GetResources(), hc, h); err != nil {
		return nil, err
	}
	if in.User != nil {
		cc.User, hc.GroupAdd = in.User.engineUser()
		labels[LabelUser] = in.User.String()
	}
	if err := security(in, cc, hc, h); err != nil {
		return nil, err
	}
	return &Spec{
		Name: ContainerName(project, service, md.GetAttempt()), Project: project, Service: service,
		Config: cc, HostConfig: hc,
	}, nil
}

// reservedLabel reports whether a label key belongs to cri-compose or
// Compose: never taken from a request.
func reservedLabel(k string) bool {
	return strings.HasPrefix(k, "io.cri-compose.") || strings.HasPrefix(k, "com.docker.compose.")
}

func mountsPath(ms []*runtime.Mount, path string) bool {
	for _, m := range ms {
		if filepath.Clean(m.GetContainerPath()) == path {
			return true
		}
	}
	return false
}

func mounts(ms []*runtime.Mount, images, staged map[int]string, hc *container.HostConfig, h Host) error {
	for i, m := range ms {
		if m.GetImage() != nil {
			if err := ValidateImageMount(m); err != nil {
				return err
			}
			src := images[i]
			if src == "" {
				// Image volumes need an engine that mounts images (API
				// 1.48+), or a copy of the image on the engine's host.
				return fmt.Errorf("%w: image volume mounts (%q) are not supported on this engine", ErrUnsupported, m.GetContainerPath())
			}
			if strings.Contains(src, ":") {
				return invalid("image volume source %q holds ':'", src)
			}
			hc.Binds = append(hc.Binds, src+":"+m.GetContainerPath()+":ro,rprivate")
			continue
		}
		src, dst := m.GetHostPath(), m.GetContainerPath()
		if src == "" || dst == "" {
			return invalid("mount needs host_path and container_path")
		}
		if !filepath.IsAbs(dst) {
			return invalid("mount container_path %q must be absolute", dst)
		}
		if strings.Contains(src, ":") || strings.Contains(dst, ":") {
			return invalid("mount paths may not contain ':' (%q -> %q)", src, dst)
		}
		if h.StageMounts { // stage.go
			sm, ok, err := stagedMount(m, staged[i])
			if err != nil {
				return err
			}
			if ok {
				hc.Mounts = append(hc.Mounts, sm)
			}
			continue
		}
		if m.GetRecursiveReadOnly() {
			if err := recursiveReadOnly(m, hc, h); err != nil {
				return err
			}
			continue
		}
		prop := mount.PropagationRPrivate
		switch m.GetPropagation() {
		case runtime.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
			prop = mount.PropagationRSlave
		case runtime.MountPropagation_PROPAGATION_BIDIRECTIONAL:
			prop = mount.PropagationRShared
		}
		if m.GetReadonly() && h.RecursiveReadOnly {
			// From Engine API 1.44 on, the engine makes a read-only bind
			// read-only all the way down unless told otherwise; the CRI's
			// readonly is the top mount's alone (recursive_read_only asks
			// for more), as the engine did before. A Mount, not a Bind, to
			// say so, and CreateMountpoint creates a missing host
			// directory as a Bind does.
			hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: prop, ReadOnlyNonRecursive: true, CreateMountpoint: true}})
			continue
		}
		opts := []string{}
		if m.GetReadonly() {
			opts = append(opts, "ro")
		}
		opts = append(opts, string(prop))
		// Binds (not Mounts) so that a missing host directory is created, as
		// containerd's CRI plugin does.
		hc.Binds = append(hc.Binds, src+":"+dst+":"+strings.Join(opts, ","))
	}
	return nil
}

// recursiveReadOnly mounts m read-only all the way down, where the engine
// can (h.RecursiveReadOnly): as the CRI asks, only a read-only mount with
// private propagation can be. Through Mounts, not Binds: a missing host
// path is an error, as kubelet makes the path of such a volume itself.
func recursiveReadOnly(m *runtime.Mount, hc *container.HostConfig, h Host) error {
	src, dst := m.GetHostPath(), m.GetContainerPath()
	switch {
	case !m.GetReadonly():
		return invalid("recursive read-only mount %q must be read-only", dst)
	case m.GetPropagation() != runtime.MountPropagation_PROPAGATION_PRIVATE:
		return invalid("recursive read-only mount %q needs private propagation, not %s", dst, m.GetPropagation())
	case !h.RecursiveReadOnly:
		return fmt.Errorf("%w: recursive read-only mount %q needs Engine API 1.44 or newer", ErrUnsupported, dst)
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate, ReadOnlyForceRecursive: true}})
	return nil
}

// ValidateImageMount checks an image volume mount (Mount.image): kubelet
// mounts images read-only, and the CRI says a runtime must refuse one that
// is not.
func ValidateImageMount(m *runtime.Mount) error {
	dst := m.GetContainerPath()
	switch {
	case m.GetImage().GetImage() == "":
		return invalid("image volume mount %q names no image", dst)
	case !m.GetReadonly():
		return invalid("image volume mount %q must be read-only", dst)
	case dst == "" || !filepath.IsAbs(dst):
		return invalid("image volume mount container_path %q must be absolute", dst)
	case strings.Contains(dst, ":"):
		return invalid("mount paths may not contain ':' (%q)", dst)
	case m.GetRecursiveReadOnly() && m.GetPropagation() != runtime.MountPropagation_PROPAGATION_PRIVATE:
		return invalid("image volume mount %q: recursive read-only needs private propagation", dst)
	}
	return nil
}

const minMemory = 6 << 20 // the engine refuses less

func resources(r *runtime.LinuxContainerResources, hc *container.HostConfig, h Host) error {
	if r == nil {
		return nil
	}
	switch q := r.GetCpuQuota(); {
	case q < -1:
		return invalid("cpu_quota %d is negative", q)
	case q > 0 && q < 1000:
		return invalid("cpu_quota %d is below the 1ms minimum", q)
	}
	if p := r.GetCpuPeriod(); p != 0 && (p < 1000 || p > 1000000) {
		return invalid("cpu_period %d is outside 1000..1000000", p)
	}
	if s := r.GetCpuShares(); s < 0 || s > 262144 {
		return invalid("cpu_shares %d is outside 0..262144", s)
	}
	if m := r.GetMemoryLimitInBytes(); m < 0 || (m > 0 && m < minMemory) {
		return invalid("memory_limit_in_bytes %d: the minimum is %d", m, minMemory)
	}
	if m := r.GetMemorySwapLimitInBytes(); m < -1 {
		return invalid("memory_swap_limit_in_bytes %d is negative", m)
	}
	o := r.GetOomScoreAdj()
	if o < -1000 || o > 1000 {
		return invalid("oom_score_adj %d is outside -1000..1000", o)
	}
	if o < 0 && !h.NegativeOOMScoreAdj {
		// runc cannot lower it without CAP_SYS_RESOURCE in the bounding
		// set, which some hosts' sandboxes drop.
		o = 0
	}
	hc.CPUPeriod = r.GetCpuPeriod()
	hc.CPUQuota = r.GetCpuQuota()
	hc.CPUShares = r.GetCpuShares()
	hc.Memory = r.GetMemoryLimitInBytes()
	if hc.Memory > 0 {
		hc.MemorySwap = r.GetMemorySwapLimitInBytes()
		if hc.MemorySwap != 0 && hc.MemorySwap != -1 && hc.MemorySwap < hc.Memory {
			return invalid("memory_swap_limit_in_bytes %d is below memory_limit_in_bytes %d", hc.MemorySwap, hc.Memory)
		}
	}
	hc.CpusetCpus = r.GetCpusetCpus()
	hc.CpusetMems = r.GetCpusetMems()
	hc.OomScoreAdj = int(o)
	return nil
}

// normalizeCap turns "net_admin" or "NET_ADMIN" into "CAP_NET_ADMIN".
func normalizeCap(c string) string {
	c = strings.ToUpper(c)
	if c == "ALL" || strings.HasPrefix(c, "CAP_") {
		return c
	}
	return "CAP_" + c
}

// clampCaps keeps the capabilities the host has, expanding ALL to them.
func clampCaps(caps []string, h Host) []string {
	var out []string
	have := map[string]bool{}
	for _, c := range h.Capabilities {
		have[c] = true
	}
	for _, c := range caps {
		c = normalizeCap(c)
		switch {
		case c == "ALL" && h.Capabilities != nil:
			out = append(out, h.Capabilities...)
		case h.Capabilities == nil || c == "ALL" || have[c]:
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return dedup(out)
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func security(in ContainerInput, cc *container.Config, hc *container.HostConfig, h Host) error {
	sc := in.Config.GetLinux().GetSecurityContext()
	if sc == nil {
		hc.SecurityOpt = append(hc.SecurityOpt, "seccomp=unconfined") // none named: unconfined
		return nil
	}
	if sc.GetPrivileged() && !in.Sandbox.GetLinux().GetSecurityContext().GetPrivileged() {
		return invalid("privileged container in a sandbox that is not privileged")
	}
	if in.User == nil { // else resolved by the caller: ContainerSpec set it
		if err := runAsUser(sc, cc, hc); err != nil {
			return err
		}
	}
	hc.ReadonlyRootfs = sc.GetReadonlyRootfs()
	if sc.GetNoNewPrivs() {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges:true")
	}
	// Masked and read-only paths: nil keeps the engine's defaults, an empty
	// list (what kubelet sends for privileged or Unmasked) means none.
	if mp := sc.GetMaskedPaths(); mp != nil {
		hc.MaskedPaths = mp
	}
	if rp := sc.GetReadonlyPaths(); rp != nil {
		hc.ReadonlyPaths = rp
	}
	if !sc.GetPrivileged() { // privileged is never confined by seccomp
		if err := seccomp(sc, in.SeccompProfile, hc); err != nil {
			return err
		}
	}
	if err := apparmor(sc, hc, h); err != nil {
		return err
	}
	if sc.GetPrivileged() {
		privileged(hc, h)
		return nil
	}
	hc.CapAdd = clampCaps(sc.GetCapabilities().GetAddCapabilities(), h)
	for _, c := range sc.GetCapabilities().GetDropCapabilities() {
		hc.CapDrop = append(hc.CapDrop, normalizeCap(c))
	}
	if len(sc.GetCapabilities().GetAddAmbientCapabilities()) > 0 {
		return invalid("ambient capabilities are not supported by the Docker Engine")
	}
	return nil
}

// runAsUser passes run_as_* on to the engine as they are: it resolves
// names and adds the image's groups of the user itself.
func runAsUser(sc *runtime.LinuxContainerSecurityContext, cc *container.Config, hc *container.HostConfig) error {
	user := ""
	switch {
	case sc.GetRunAsUser() != nil:
		user = strconv.FormatInt(sc.GetRunAsUser().GetValue(), 10)
	case sc.GetRunAsUsername() != "":
		user = sc.GetRunAsUsername()
	}
	if g := sc.GetRunAsGroup(); g != nil {
		if user == "" {
			return invalid("run_as_group needs run_as_user or run_as_username")
		}
		user += ":" + strconv.FormatInt(g.GetValue(), 10)
	}
	cc.User = user
	for _, g := range sc.GetSupplementalGroups() {
		hc.GroupAdd = append(hc.GroupAdd, strconv.FormatInt(g, 10))
	}
	return nil
}

// privileged runs the container privileged where the engine can; where the
// host's bounding set lacks capabilities, `--privileged` fails in runc, so
// it is emulated: every capability the host has, no seccomp or AppArmor
// confinement, nothing masked or read-only.
func privileged(hc *container.HostConfig, h Host) {
	hc.MaskedPaths = []string{}
	hc.ReadonlyPaths = []string{}
	if h.FullPrivileged || h.Capabilities == nil {
		hc.Privileged = true
		return
	}
	hc.CapAdd = append([]string(nil), h.Capabilities...)
	hc.SecurityOpt = append(hc.SecurityOpt, "seccomp=unconfined")
	if h.AppArmor {
		hc.SecurityOpt = append(hc.SecurityOpt, "apparmor=unconfined")
	}
	// Device cgroup access to every device, as privileged has.
	hc.DeviceCgroupRules = []string{"a *:* rwm"}
}

func seccomp(sc *runtime.LinuxContainerSecurityContext, profile []byte, hc *container.HostConfig) error {
	p := sc.GetSeccomp()
	switch {
	case p != nil && p.GetProfileType() == runtime.SecurityProfile_Unconfined,
		p == nil && (sc.GetSeccompProfilePath() == "unconfined" || sc.GetSeccompProfilePath() == ""):
		// No profile named means unconfined in the CRI (kubelet names
		// RuntimeDefault when a pod asks for it), as containerd does.
		hc.SecurityOpt = append(hc.SecurityOpt, "seccomp=unconfined")
	case p != nil && p.GetProfileType() == runtime.SecurityProfile_Localhost,
		p == nil && strings.HasPrefix(sc.GetSeccompProfilePath(), "localhost/"):
		if len(profile) == 0 {
			return invalid("localhost seccomp profile is empty or was not read")
		}
		hc.SecurityOpt = append(hc.SecurityOpt, "seccomp="+string(profile))
	}
	return nil
}

// SeccompProfilePath is the localhost profile file a request names, if any,
// for the caller to read.
func SeccompProfilePath(cfg *runtime.ContainerConfig) string {
	sc := cfg.GetLinux().GetSecurityContext()
	if p := sc.GetSeccomp(); p != nil {
		if p.GetProfileType() == runtime.SecurityProfile_Localhost {
			return p.GetLocalhostRef()
		}
		return ""
	}
	return strings.TrimPrefix(sc.GetSeccompProfilePath(), "localhost/")
}

func apparmor(sc *runtime.LinuxContainerSecurityContext, hc *container.HostConfig, h Host) error {
	p := sc.GetApparmor()
	name := ""
	switch {
	case p != nil && p.GetProfileType() == runtime.SecurityProfile_Unconfined,
		p == nil && sc.GetApparmorProfile() == "unconfined":
		name = "unconfined"
	case p != nil && p.GetProfileType() == runtime.SecurityProfile_Localhost:
		name = p.GetLocalhostRef()
	case p == nil && strings.HasPrefix(sc.GetApparmorProfile(), "localhost/"):
		name = strings.TrimPrefix(sc.GetApparmorProfile(), "localhost/")
	}
	if name == "" {
		return nil
	}
	if !h.AppArmor {
		if name == "unconfined" {
			return nil // nothing confines it anyway
		}
		return invalid("apparmor profile %q requested but AppArmor is not enabled on this host", name)
	}
	hc.SecurityOpt = append(hc.SecurityOpt, "apparmor="+name)
	return nil
}

// cdiDevices asks the engine for the container's CDI devices by their
// fully-qualified names (vendor.com/class=name), which the engine resolves
// with the spec files of its CDI spec dirs, as containerd does with its own.
// An engine without CDI would drop the request or fail with a message about
// drivers: refuse it here, saying why.
func cdiDevices(devs []*runtime.CDIDevice, hc *container.HostConfig, h Host) error {
	if len(devs) == 0 {
		return nil
	}
	var ids []string
	for _, d := range devs {
		if _, _, _, err := cdiparser.ParseQualifiedName(d.GetName()); err != nil {
			return invalid("CDI device: %v (a fully-qualified name is vendor.com/class=name)", err)
		}
		ids = append(ids, d.GetName())
	}
	if !h.CDI {
		return fmt.Errorf("%w: CDI devices (%s) need an engine with CDI (Engine API 1.44 or newer, CDI enabled)", ErrUnsupported, strings.Join(ids, ", "))
	}
	hc.DeviceRequests = append(hc.DeviceRequests, container.DeviceRequest{Driver: "cdi", DeviceIDs: ids})
	return nil
}
