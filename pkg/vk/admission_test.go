package vk

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func sysctlPod(hostNet, hostIPC bool, hostUsers *bool, sysctls ...string) *v1.Pod {
	sc := &v1.PodSecurityContext{}
	for _, s := range sysctls {
		sc.Sysctls = append(sc.Sysctls, v1.Sysctl{Name: s, Value: "1"})
	}
	return &v1.Pod{Spec: v1.PodSpec{HostNetwork: hostNet, HostIPC: hostIPC, HostUsers: hostUsers, SecurityContext: sc}}
}

func TestSafeSysctlAllowlistByKernel(t *testing.T) {
	all := safeSysctlAllowlist("6.8.0-45-generic\n")
	if len(all) != len(safeSysctls) {
		t.Errorf("kernel 6.8: %d safe sysctls, want all %d: %v", len(all), len(safeSysctls), all)
	}
	old := safeSysctlAllowlist("4.4.0")
	if !slices.Contains(old, "net.ipv4.ip_local_reserved_ports") || slices.Contains(old, "net.ipv4.tcp_keepalive_time") ||
		slices.Contains(old, "net.ipv4.tcp_rmem") {
		t.Errorf("kernel 4.4: %v", old)
	}
	if got := safeSysctlAllowlist(""); !slices.Equal(got, []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
		"net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start"}) {
		t.Errorf("unknown kernel: %v", got)
	}
}

func TestNewSysctlAllowlistRefuses(t *testing.T) {
	for _, p := range []string{"kernel.msg*", "net.*", "net.ipv4.conf.all.*", "fs.mqueue.*", "kernel.shmmax", "net/ipv4/ip_forward"} {
		if _, err := newSysctlAllowlist([]string{p}); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for p, want := range map[string]string{
		"kernel.*":      `the sysctls "kernel." are not known to be namespaced`,
		"vm.swappiness": `the sysctls "vm.swappiness" are not known to be namespaced`,
		"Net.ipv4":      `sysctl "Net.ipv4" must have at most 253 characters and match regex`,
		"net..a":        `sysctl "net..a" must have`,
	} {
		_, err := newSysctlAllowlist([]string{p})
		if err == nil || len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("%q: err %v, want %q…", p, err, want)
		}
	}
}

func TestAdmitSysctls(t *testing.T) {
	a, err := newAdmitter([]string{"kernel.msg*", "net.core.somaxconn"}, "6.8.0", "linux")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pod  *v1.Pod
		msg  string // "": admitted
	}{
		{"none", &v1.Pod{}, ""},
		{"safe", sysctlPod(false, false, nil, "net.ipv4.tcp_syncookies", "kernel.shm_rmid_forced"), ""},
		{"allowed by pattern", sysctlPod(false, false, nil, "kernel.msgmax"), ""},
		{"allowed, slashes", sysctlPod(false, false, nil, "net/core/somaxconn"), ""},
		{"not allowlisted", sysctlPod(false, false, nil, "net.ipv4.tcp_syncookies", "kernel.sem"), `forbidden sysctl: "kernel.sem" not allowlisted`},
		{"safe net with hostNetwork", sysctlPod(true, false, nil, "net.ipv4.ip_local_port_range"), `forbidden sysctl: "net.ipv4.ip_local_port_range" not allowed with host Net enabled`},
		{"unsafe net with hostNetwork", sysctlPod(true, false, nil, "net.core.somaxconn"), `forbidden sysctl: "net.core.somaxconn" not allowed with host Net enabled`},
		{"ipc with hostIPC", sysctlPod(false, true, nil, "kernel.msgmax"), `forbidden sysctl: "kernel.msgmax" not allowed with host IPC enabled`},
		{"ipc with hostNetwork", sysctlPod(true, false, nil, "kernel.msgmax"), ""},
	} {
		ok, reason, msg := a.admit(c.pod)
		if c.msg == "" {
			if !ok {
				t.Errorf("%s: refused: %s %s", c.name, reason, msg)
			}
			continue
		}
		if ok || reason != "SysctlForbidden" || msg != c.msg {
			t.Errorf("%s: ok=%v %s %q, want SysctlForbidden %q", c.name, ok, reason, msg, c.msg)
		}
	}
	// A user namespace sysctl needs a pod of its own user namespace.
	u, err := newAdmitter([]string{"user.max_user_namespaces"}, "6.8.0", "linux")
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, msg := u.admit(sysctlPod(false, false, nil, "user.max_user_namespaces")); ok ||
		msg != `forbidden sysctl: "user.max_user_namespaces" not allowed with host User enabled` {
		t.Errorf("user sysctl, host users: ok=%v %q", ok, msg)
	}
	if ok, _, msg := u.admit(sysctlPod(false, false, ptr.To(false), "user.max_user_namespaces")); !ok {
		t.Errorf("user sysctl, own user namespace: %q", msg)
	}
	// Without --allowed-unsafe-sysctls, kubelet's own example.
	d, err := newAdmitter(nil, "6.8.0", "linux")
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, msg := d.admit(sysctlPod(false, false, nil, "kernel.msgmax")); ok || msg != `forbidden sysctl: "kernel.msgmax" not allowlisted` {
		t.Errorf("default: ok=%v %q", ok, msg)
	}
}

func TestAdmitOS(t *testing.T) {
	a, err := newAdmitter(nil, "6.8.0", "linux")
	if err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{Spec: v1.PodSpec{OS: &v1.PodOS{Name: v1.Linux}}}
	if ok, reason, msg := a.admit(pod); !ok {
		t.Errorf("linux pod refused: %s %s", reason, msg)
	}
	pod.Spec.OS.Name = v1.Windows
	if ok, reason, msg := a.admit(pod); ok || reason != "PodOSNotSupported" || msg != "Failed to admit pod as the OS field doesn't match node OS" {
		t.Errorf("windows pod: ok=%v %s %q", ok, reason, msg)
	}
	pod.Labels = map[string]string{v1.LabelOSStable: "windows"}
	if ok, reason, _ := a.admit(pod); ok || reason != "PodOSSelectorNodeLabelDoesNotMatch" {
		t.Errorf("windows label: ok=%v %s, want the label checked first", ok, reason)
	}
}

// A pod admission refused is Failed as kubelet reports it, and nothing of
// it reaches the runtime.
func TestRejectedPodNeverRuns(t *testing.T) {
	e := newTestEnv(t)
	pod := testPod()
	pod.Spec.SecurityContext = &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.msgmax", Value: "65536"}}}
	pod.Status.QOSClass = v1.PodQOSBestEffort
	if err := e.p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	w := e.p.workers[pod.UID]
	for range 3 {
		w.pass(context.Background())
	}
	got := e.last(t)
	if got.Status.Phase != v1.PodFailed || got.Status.Reason != "SysctlForbidden" ||
		got.Status.Message != `Pod was rejected: forbidden sysctl: "kernel.msgmax" not allowlisted` ||
		got.Status.QOSClass != v1.PodQOSBestEffort || got.Status.StartTime == nil {
		t.Errorf("status %+v", got.Status)
	}
	e.rt.Lock()
	defer e.rt.Unlock()
	if len(e.rt.Sandboxes) != 0 || len(e.rt.Containers) != 0 {
		t.Errorf("runtime holds %d sandboxes, %d containers of a rejected pod", len(e.rt.Sandboxes), len(e.rt.Containers))
	}
}
