package vk

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DNS is how the node resolves names for its pods, like kubelet's
// --cluster-dns, --cluster-domain and --resolv-conf.
type DNS struct {
	// ClusterDNS are the cluster DNS servers for dnsPolicy ClusterFirst.
	// With none, ClusterFirst falls back to Default, as in kubelet.
	ClusterDNS    []string
	ClusterDomain string
	// ResolvConf is the host's resolv.conf for dnsPolicy Default ("" for
	// none: the runtime's own default then applies).
	ResolvConf string
}

// domain is the cluster's DNS domain, cluster.local unless set.
func (d DNS) domain() string {
	if d.ClusterDomain == "" {
		return "cluster.local"
	}
	return d.ClusterDomain
}

// makeSandboxConfig is the CRI sandbox of a pod at attempt, as kubelet
// builds it (generatePodSandboxConfig).
func (p *Provider) makeSandboxConfig(pod *v1.Pod, attempt uint32) (*runtimeapi.PodSandboxConfig, error) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: pod.Name, Namespace: pod.Namespace, Uid: string(pod.UID), Attempt: attempt,
		},
		Labels:       p.sandboxLabels(pod),
		Annotations:  copyMap(pod.Annotations),
		LogDirectory: p.podLogDir(pod),
	}
	if !pod.Spec.HostNetwork {
		h, domain, err := podHostnameAndDomain(pod, p.cfg.DNS.domain())
		if err == nil {
			h, err = kernelHostname(pod, h, domain)
		}
		if err != nil {
			return nil, err
		}
		cfg.Hostname = h
	}
	dns, err := p.cfg.DNS.podDNS(pod)
	if err != nil {
		return nil, err
	}
	cfg.DnsConfig = dns
	for _, c := range pod.Spec.Containers {
		for _, port := range c.Ports {
			if port.HostPort <= 0 { // only published ports reach the runtime
				continue
			}
			cfg.PortMappings = append(cfg.PortMappings, &runtimeapi.PortMapping{
				Protocol:      protocol(port.Protocol),
				ContainerPort: port.ContainerPort,
				HostPort:      port.HostPort,
				HostIp:        port.HostIP,
			})
		}
	}
	cfg.Linux = sandboxLinux(pod)
	return cfg, nil
}

func (p *Provider) sandboxLabels(pod *v1.Pod) map[string]string {
	l := copyMap(pod.Labels)
	l[labelPodName] = pod.Name
	l[labelPodNamespace] = pod.Namespace
	l[labelPodUID] = string(pod.UID)
	l[labelNode] = p.cfg.NodeName
	return l
}

func (p *Provider) podLogDir(pod *v1.Pod) string {
	return p.logDirOf(pod.Namespace, pod.Name, string(pod.UID))
}

// logDirOf is the log directory of a pod, <root>/logs/<ns>_<name>_<uid>
// as kubelet's /var/log/pods names it.
func (p *Provider) logDirOf(namespace, name, uid string) string {
	return filepath.Join(p.cfg.StateDir, "logs", namespace+"_"+name+"_"+uid)
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+4)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func protocol(p v1.Protocol) runtimeapi.Protocol {
	switch p {
	case v1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case v1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}

// namespaceOptions are the pod's host namespaces; pid is shared in the pod
// with shareProcessNamespace.
func namespaceOptions(pod *v1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if pod.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if pod.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case pod.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func sandboxLinux(pod *v1.Pod) *runtimeapi.LinuxPodSandboxConfig {
	sc := &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: namespaceOptions(pod)}
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *psc.RunAsUser}
		}
		if psc.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *psc.RunAsGroup}
		}
		sc.SupplementalGroups = append(sc.SupplementalGroups, psc.SupplementalGroups...)
		if psc.FSGroup != nil {
			sc.SupplementalGroups = append(sc.SupplementalGroups, *psc.FSGroup)
		}
		sc.SelinuxOptions = selinux(psc.SELinuxOptions)
		sc.Seccomp = seccomp(psc.SeccompProfile)
	}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		if c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged {
			sc.Privileged = true
		}
	}
	l := &runtimeapi.LinuxPodSandboxConfig{SecurityContext: sc, Resources: podSandboxResources(pod)}
	if psc := pod.Spec.SecurityContext; psc != nil && len(psc.Sysctls) > 0 {
		l.Sysctls = map[string]string{}
		for _, s := range psc.Sysctls {
			// As kubelet: the runtime gets dot-separated names
			// ("kernel/shm_rmid_forced" is kernel.shm_rmid_forced).
			l.Sysctls[utilsysctl.NormalizeName(s.Name)] = s.Value
		}
	}
	return l
}

func selinux(o *v1.SELinuxOptions) *runtimeapi.SELinuxOption {
	if o == nil {
		return nil
	}
	return &runtimeapi.SELinuxOption{User: o.User, Role: o.Role, Type: o.Type, Level: o.Level}
}

// seccomp maps a seccompProfile; unset is Unconfined, as kubelet's default
// (without --seccomp-default).
func seccomp(p *v1.SeccompProfile) *runtimeapi.SecurityProfile {
	if p == nil {
		return nil
	}
	switch p.Type {
	case v1.SeccompProfileTypeRuntimeDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}
	case v1.SeccompProfileTypeLocalhost:
		lp := ""
		if p.LocalhostProfile != nil {
			lp = *p.LocalhostProfile
		}
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost, LocalhostRef: lp}
	}
	return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}
}

// podDNS is the pod's resolv.conf as kubelet makes it for its dnsPolicy
// and dnsConfig. nil leaves it to the runtime.
func (d DNS) podDNS(pod *v1.Pod) (*runtimeapi.DNSConfig, error) {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = v1.DNSClusterFirst
	}
	if policy == v1.DNSClusterFirst && pod.Spec.HostNetwork {
		policy = v1.DNSDefault // ClusterFirst means Default for host-network pods
	}
	if policy == v1.DNSClusterFirstWithHostNet {
		policy = v1.DNSClusterFirst
	}
	if (policy == v1.DNSClusterFirst) && len(d.ClusterDNS) == 0 {
		policy = v1.DNSDefault // no cluster DNS configured: kubelet falls back too
	}
	var cfg *runtimeapi.DNSConfig
	switch policy {
	case v1.DNSClusterFirst:
		domain := d.domain()
		cfg = &runtimeapi.DNSConfig{
			Servers:  slices.Clone(d.ClusterDNS),
			Searches: []string{pod.Namespace + ".svc." + domain, "svc." + domain, domain},
			Options:  []string{"ndots:5"},
		}
		if host, err := d.hostDNS(); err == nil && host != nil {
			cfg.Searches = append(cfg.Searches, host.Searches...)
		}
	case v1.DNSDefault:
		host, err := d.hostDNS()
		if err != nil {
			return nil, err
		}
		cfg = host
	case v1.DNSNone:
		cfg = &runtimeapi.DNSConfig{}
	}
	if pc := pod.Spec.DNSConfig; pc != nil {
		if cfg == nil {
			cfg = &runtimeapi.DNSConfig{}
		}
		cfg.Servers = dedup(append(cfg.Servers, pc.Nameservers...))
		cfg.Searches = dedup(append(slices.Clone(pc.Searches), cfg.Searches...))
		cfg.Options = mergeDNSOptions(cfg.Options, pc.Options)
	}
	if cfg != nil && len(cfg.Searches) > 32 { // resolv.conf's limit in glibc ≥ 2.26
		cfg.Searches = cfg.Searches[:32]
	}
	return cfg, nil
}

// hostDNS reads ResolvConf. Loopback nameservers are dropped, as Docker
// does: the pod has its own loopback. nil when there is nothing to use.
func (d DNS) hostDNS() (*runtimeapi.DNSConfig, error) {
	if d.ResolvConf == "" {
		return nil, nil
	}
	b, err := os.ReadFile(d.ResolvConf)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.ResolvConf, err)
	}
	cfg := &runtimeapi.DNSConfig{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			if a, err := netip.ParseAddr(f[1]); err == nil && !a.IsLoopback() {
				cfg.Servers = append(cfg.Servers, f[1])
			}
		case "search", "domain":
			cfg.Searches = f[1:]
		case "options":
			cfg.Options = append(cfg.Options, f[1:]...)
		}
	}
	if len(cfg.Servers) == 0 {
		return nil, nil // let the runtime pick (Docker's embedded DNS)
	}
	return cfg, nil
}

func dedup(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// mergeDNSOptions lets the pod's options override the base's by name.
func mergeDNSOptions(base []string, pod []v1.PodDNSConfigOption) []string {
	byName := map[string]string{}
	var order []string
	add := func(name, opt string) {
		if _, ok := byName[name]; !ok {
			order = append(order, name)
		}
		byName[name] = opt
	}
	for _, o := range base {
		name, _, _ := strings.Cut(o, ":")
		add(name, o)
	}
	for _, o := range pod {
		opt := o.Name
		if o.Value != nil {
			opt += ":" + *o.Value
		}
		add(o.Name, opt)
	}
	out := make([]string, 0, len(order))
	for _, n := range order {
		out = append(out, byName[n])
	}
	return out
}
