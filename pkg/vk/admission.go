package vk

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	utilsysctl "k8s.io/component-helpers/node/util/sysctl"
	"k8s.io/klog/v2"
)

// Pod admission, as kubelet's admit handlers that apply to a node of
// vk-cri (HandlePodAdditions): a pod refused here never reaches the
// runtime; it is Failed with the handler's reason and "Pod was rejected: "
// before its message (kubelet's rejectPod), with a Warning event.

// Reasons of kubelet's admit handlers (pkg/kubelet/sysctl,
// pkg/kubelet/lifecycle).
const (
	reasonSysctlForbidden           = "SysctlForbidden"
	reasonPodOSSelectorDoesNotMatch = "PodOSSelectorNodeLabelDoesNotMatch"
	reasonPodOSNotSupported         = "PodOSNotSupported"
)

// safeSysctls is kubelet's safe set (pkg/kubelet/sysctl/safe_sysctls.go
// of v1.37), each with the kernel that namespaced it ("": always).
var safeSysctls = []struct{ name, kernel string }{
	{"kernel.shm_rmid_forced", ""},
	{"net.ipv4.ip_local_port_range", ""},
	{"net.ipv4.tcp_syncookies", ""},
	{"net.ipv4.ping_group_range", ""},
	{"net.ipv4.ip_unprivileged_port_start", ""},
	{"net.ipv4.ip_local_reserved_ports", "3.16"},
	{"net.ipv4.tcp_keepalive_time", "4.5"},
	{"net.ipv4.tcp_fin_timeout", "4.6"},
	{"net.ipv4.tcp_keepalive_intvl", "4.5"},
	{"net.ipv4.tcp_keepalive_probes", "4.5"},
	{"net.ipv4.tcp_rmem", "4.15"},
	{"net.ipv4.tcp_wmem", "4.15"},
	{"net.ipv4.tcp_slow_start_after_idle", "4.15"},
	{"net.ipv4.tcp_notsent_lowat", "4.6"},
}

// safeSysctlAllowlist is kubelet's SafeSysctlAllowlist for a kernel
// release (/proc/sys/kernel/osrelease): a sysctl namespaced only by a
// later kernel is left out, and so is every such one when the release
// cannot be read.
func safeSysctlAllowlist(kernel string) []string {
	kv, err := version.ParseGeneric(strings.TrimSpace(kernel))
	if err != nil {
		klog.ErrorS(err, "Failed to get kernel version, unable to determine which sysctls are available")
	}
	var list []string
	for _, s := range safeSysctls {
		if s.kernel == "" || kv != nil && kv.AtLeast(version.MustParseGeneric(s.kernel)) {
			list = append(list, s.name)
		} else {
			klog.InfoS("Kernel version is too old, dropping the sysctl from safe sysctl list", "kernelVersion", kv, "sysctl", s.name)
		}
	}
	return list
}

// sysctlPattern is kubelet's check of --allowed-unsafe-sysctls
// (policy validation's IsValidSysctlPattern): dot or slash separated
// segments, the last of which may end in "*".
var sysctlPattern = regexp.MustCompile(`^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]$`)

const sysctlMaxLength = 253

// sysctlAllowlist is kubelet's patternAllowlist: sysctls and prefixes
// (patterns ending in "*"), each with its kernel namespace.
type sysctlAllowlist struct {
	sysctls  map[string]utilsysctl.Namespace
	prefixes map[string]utilsysctl.Namespace
}

// newSysctlAllowlist is kubelet's NewAllowlist: a pattern that is not
// well formed or whose sysctls are not known to be namespaced is an error.
func newSysctlAllowlist(patterns []string) (*sysctlAllowlist, error) {
	w := &sysctlAllowlist{sysctls: map[string]utilsysctl.Namespace{}, prefixes: map[string]utilsysctl.Namespace{}}
	for _, s := range patterns {
		if len(s) > sysctlMaxLength || !sysctlPattern.MatchString(s) {
			return nil, fmt.Errorf("sysctl %q must have at most %d characters and match regex %s", s, sysctlMaxLength, sysctlPattern)
		}
		ns, sysctlOrPrefix, prefixed := utilsysctl.GetNamespace(s)
		if ns == utilsysctl.UnknownNamespace {
			return nil, fmt.Errorf("the sysctls %q are not known to be namespaced", sysctlOrPrefix)
		}
		if prefixed {
			w.prefixes[sysctlOrPrefix] = ns
		} else {
			w.sysctls[sysctlOrPrefix] = ns
		}
	}
	return w, nil
}

// validate is kubelet's validateSysctl: the sysctl must be allowlisted,
// and a pod sharing the host's namespace of it may not set it.
func (w *sysctlAllowlist) validate(sysctl string, hostNet, hostIPC, hostUsers bool) error {
	sysctl = utilsysctl.NormalizeName(sysctl)
	shared := func(ns utilsysctl.Namespace) error {
		if ns == utilsysctl.IPCNamespace && hostIPC || ns == utilsysctl.NetNamespace && hostNet ||
			ns == utilsysctl.UserNamespace && hostUsers {
			return fmt.Errorf("%q not allowed with host %s enabled", sysctl, ns)
		}
		return nil
	}
	if ns, ok := w.sysctls[sysctl]; ok {
		return shared(ns)
	}
	for p, ns := range w.prefixes {
		if strings.HasPrefix(sysctl, p) {
			return shared(ns)
		}
	}
	return fmt.Errorf("%q not allowlisted", sysctl)
}

// admit is kubelet's sysctl admit handler.
func (w *sysctlAllowlist) admit(pod *v1.Pod) (ok bool, reason, message string) {
	sc := pod.Spec.SecurityContext
	if sc == nil || len(sc.Sysctls) == 0 {
		return true, "", ""
	}
	// hostUsers defaults to true: a pod without it shares the host's
	// user namespace.
	hostUsers := pod.Spec.HostUsers == nil || *pod.Spec.HostUsers
	for _, s := range sc.Sysctls {
		if err := w.validate(s.Name, pod.Spec.HostNetwork, pod.Spec.HostIPC, hostUsers); err != nil {
			return false, reasonSysctlForbidden, fmt.Sprintf("forbidden sysctl: %v", err)
		}
	}
	return true, "", ""
}

// admitter runs the admit handlers in kubelet's order: sysctls, then the
// predicate handler's OS checks (the kubernetes.io/os label, spec.os).
type admitter struct {
	sysctls *sysctlAllowlist
	nodeOS  string
}

// newAdmitter allows the safe sysctls of kernel and allowedUnsafe
// (kubelet's --allowed-unsafe-sysctls) to pods of a node running nodeOS.
func newAdmitter(allowedUnsafe []string, kernel, nodeOS string) (*admitter, error) {
	var safe []string
	if nodeOS == "linux" {
		safe = safeSysctlAllowlist(kernel)
	}
	w, err := newSysctlAllowlist(append(safe, allowedUnsafe...))
	if err != nil {
		return nil, err
	}
	return &admitter{sysctls: w, nodeOS: nodeOS}, nil
}

// newHostAdmitter is newAdmitter for this host, as kubelet's: its
// kernel and runtime.GOOS, which the Node reports (hostinfo.go).
func newHostAdmitter(allowedUnsafe []string) (*admitter, error) {
	kernel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil && runtime.GOOS == "linux" {
		klog.ErrorS(err, "Failed to get kernel version, unable to determine which sysctls are available")
	}
	return newAdmitter(allowedUnsafe, string(kernel), runtime.GOOS)
}

// admit says whether the pod may run on the node, and if not why, with
// kubelet's reason and message.
func (a *admitter) admit(pod *v1.Pod) (ok bool, reason, message string) {
	if ok, reason, message := a.sysctls.admit(pod); !ok {
		return false, reason, message
	}
	if podOS, ok := pod.Labels[v1.LabelOSStable]; ok && podOS != a.nodeOS {
		return false, reasonPodOSSelectorDoesNotMatch, "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != a.nodeOS {
		return false, reasonPodOSNotSupported, "Failed to admit pod as the OS field doesn't match node OS"
	}
	return true, "", ""
}

// rejectedStatus is the status kubelet gives a pod it refused
// (rejectPod): Failed, the QoS class kept.
func rejectedStatus(pod *v1.Pod, reason, message string) *v1.PodStatus {
	return &v1.PodStatus{
		QOSClass: pod.Status.QOSClass,
		Phase:    v1.PodFailed,
		Reason:   reason,
		Message:  "Pod was rejected: " + message,
	}
}

// admitPod runs admission on the pod of a new worker: a pod refused is
// Failed (rejectedStatus) with a Warning event of the reason, as
// kubelet's, and its worker only reports that.
func (p *Provider) admitPod(w *podWorker, pod *v1.Pod) {
	if p.admission == nil {
		return
	}
	ok, reason, message := p.admission.admit(pod)
	if ok {
		ok, reason, message = p.admitPodLevelResources(pod)
	}
	if ok {
		return
	}
	klog.InfoS("Pod admission denied", "pod", klog.KObj(pod), "podUID", pod.UID, "reason", reason, "message", message)
	p.podEvent(pod, true, reason, message)
	st := rejectedStatus(pod, reason, message)
	start := metav1.NewTime(w.startTime) // the status manager's, on a pod without one
	st.StartTime = &start
	w.mu.Lock()
	w.rejected = st
	w.mu.Unlock()
}

// rejection is the status of a pod admission refused, nil for one it let
// through.
func (w *podWorker) rejection() *v1.PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rejected
}

// passRejected is a pass for a pod admission refused: what the runtime
// holds of it (a pod admitted before vk-cri restarted with other
// settings) is removed, with a grace period of one second as kubelet
// kills pods its workers do not know, and the rejected status reported.
func (w *podWorker) passRejected(ctx context.Context, pod *v1.Pod) {
	obs := &observation{}
	if !w.cleared {
		o, err := w.kill(ctx, 1)
		if err != nil {
			if ctx.Err() == nil {
				klog.ErrorS(err, "Removing a rejected pod from the runtime; will retry", "pod", klog.KObj(pod))
			}
			w.wakeAfter(retryAfterError)
		} else {
			w.cleared, obs = true, o
		}
	}
	w.report(obs, true)
}
