package vk

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The pod's /etc/hosts is the node's to write, as kubelet does it
// (kubelet_pods.go makeHostsMount): one file per pod, rewritten at each
// container start and bind-mounted over /etc/hosts of every container that
// does not mount something there itself. The runtime's own hosts file
// (the engine's) knows neither the pod's subdomain nor its hostAliases.
const (
	etcHostsPath                      = "/etc/hosts"
	managedHostsHeader                = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderWithHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
)

// nodeHostsFile is the node's hosts file, which a host-network pod's
// hosts file starts from.
var nodeHostsFile = etcHostsPath

// podHostnameAndDomain is kubelet's GeneratePodHostNameAndDomain: the
// hostnameOverride as it is (and no domain); otherwise spec.hostname or the
// pod's name, cut to 63 characters, and, with a subdomain, the domain
// SUBDOMAIN.NAMESPACE.svc.CLUSTERDOMAIN.
func podHostnameAndDomain(pod *v1.Pod, clusterDomain string) (hostname, domain string, err error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		h, err := truncateHostname(pod, *o)
		return h, "", err
	}
	hostname = pod.Name
	if pod.Spec.Hostname != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		hostname = pod.Spec.Hostname
	}
	if hostname, err = truncateHostname(pod, hostname); err != nil {
		return "", "", err
	}
	if sub := pod.Spec.Subdomain; sub != "" {
		if msgs := validation.IsDNS1123Label(sub); len(msgs) != 0 {
			return "", "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", sub, strings.Join(msgs, ";"))
		}
		domain = fmt.Sprintf("%s.%s.svc.%s", sub, pod.Namespace, clusterDomain)
	}
	return hostname, domain, nil
}

// truncateHostname cuts h to the 63 characters a hostname may have, and
// without a trailing - or ., as kubelet does.
func truncateHostname(pod *v1.Pod, h string) (string, error) {
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	if h == "" {
		return "", fmt.Errorf("pod %s/%s: empty hostname", pod.Namespace, pod.Name)
	}
	return h, nil
}

// kernelHostname is the sandbox's hostname: with setHostnameAsFQDN and a
// domain, the FQDN, which must fit the kernel's 64 characters (kubelet's
// GetNodenameForKernel).
func kernelHostname(pod *v1.Pod, hostname, domain string) (string, error) {
	if domain == "" || pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN {
		return hostname, nil
	}
	const fqdnMaxLen = 64
	fqdn := hostname + "." + domain
	if len(fqdn) > fqdnMaxLen {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, fqdnMaxLen, len(fqdn))
	}
	return fqdn, nil
}

// mountsEtcHosts tells whether c mounts a volume at /etc/hosts itself, in
// which case kubelet leaves it alone.
func mountsEtcHosts(c *v1.Container) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == etcHostsPath {
			return true
		}
	}
	return false
}

// writeHostsFile writes the pod's hosts file in its folder and returns its
// path. A host-network pod gets the node's hosts file and its
// hostAliases; any other one the managed file with its own addresses.
func writeHostsFile(dir string, pod *v1.Pod, podIPs []string, clusterDomain string) (string, error) {
	var content []byte
	if pod.Spec.HostNetwork {
		node, err := os.ReadFile(nodeHostsFile)
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		b.WriteString(managedHostsHeaderWithHostNetwork)
		b.Write(node)
		b.Write(hostAliasEntries(pod.Spec.HostAliases))
		content = b.Bytes()
	} else {
		hostname, domain, err := podHostnameAndDomain(pod, clusterDomain)
		if err != nil {
			return "", err
		}
		content = managedHostsContent(podIPs, hostname, domain, pod.Spec.HostAliases)
	}
	if err := os.MkdirAll(dir, privateDirPerm); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "etc-hosts")
	// Readable by every user in the container: it holds no secret, and a
	// container running as any user resolves names through it.
	if err := os.WriteFile(path, content, 0o644); err != nil {
		return "", err
	}
	return path, os.Chmod(path, 0o644)
}

// managedHostsContent is kubelet's managed hosts file, byte for byte.
func managedHostsContent(podIPs []string, hostname, domain string, aliases []v1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	b.Write(hostAliasEntries(aliases))
	return b.Bytes()
}

// hostAliasEntries are the hostAliases, each IP's names on one line.
func hostAliasEntries(aliases []v1.HostAlias) []byte {
	if len(aliases) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return b.Bytes()
}
