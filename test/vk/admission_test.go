package vk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// waitRejected waits for the pod to be Failed with kubelet's admission
// reason and message, and checks that nothing of it reached the runtime.
func waitRejected(t *testing.T, pod *v1.Pod, reason, message string) {
	t.Helper()
	waitFor(t, "pod rejected with "+reason, 60*time.Second, func() (bool, string) {
		p := getPod(t, pod.Namespace, pod.Name)
		return p.Status.Phase == v1.PodFailed && p.Status.Reason == reason && p.Status.Message == message,
			fmt.Sprintf("%s reason=%q message=%q", podSummary(p), p.Status.Reason, p.Status.Message)
	})
	waitEvent(t, pod.Namespace, pod.Name, reason, strings.TrimPrefix(message, "Pod was rejected: "))
	if sbs := sandboxes(t, string(pod.UID)); len(sbs) != 0 {
		t.Errorf("a rejected pod has %d sandboxes in the runtime", len(sbs))
	}
	if p := getPod(t, pod.Namespace, pod.Name); len(p.Status.ContainerStatuses) != 0 {
		t.Errorf("a rejected pod reports containers: %s", podSummary(p))
	}
}

// A sysctl neither safe nor in --allowed-unsafe-sysctls (kernel.msg* for
// the suite's vk-cri) is refused before the runtime sees the pod. (The
// API server itself refuses a net or ipc one with the host's namespace;
// the unit tests cover kubelet's check of that.)
func TestAdmissionSysctlForbidden(t *testing.T) {
	ns := namespace(t)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "forbidden", Namespace: ns},
		Spec: v1.PodSpec{
			Containers:      []v1.Container{busybox("main", "sleep 3600")},
			SecurityContext: &v1.PodSecurityContext{Sysctls: []v1.Sysctl{{Name: "kernel.sem", Value: "250 32000 32 128"}}},
		},
	})
	waitRejected(t, pod, "SysctlForbidden", `Pod was rejected: forbidden sysctl: "kernel.sem" not allowlisted`)

}

// An unsafe sysctl --allowed-unsafe-sysctls lets through is set in the
// pod, as are safe ones, one of them named with slashes.
func TestAdmissionSysctlAllowed(t *testing.T) {
	ns := namespace(t)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "allowed", Namespace: ns},
		Spec: v1.PodSpec{
			Containers: []v1.Container{busybox("main",
				"echo msgmax=$(cat /proc/sys/kernel/msgmax) range=$(cat /proc/sys/net/ipv4/ip_local_port_range) shm=$(cat /proc/sys/kernel/shm_rmid_forced); sleep 3600")},
			SecurityContext: &v1.PodSecurityContext{Sysctls: []v1.Sysctl{
				{Name: "kernel.msgmax", Value: "65536"},
				{Name: "net.ipv4.ip_local_port_range", Value: "20000 30000"},
				{Name: "kernel/shm_rmid_forced", Value: "1"},
			}},
		},
	})
	var logs string
	waitFor(t, "the sysctls read in the container", 90*time.Second, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		if p.Status.Phase == v1.PodFailed {
			t.Fatalf("pod Failed: %s %q", p.Status.Reason, p.Status.Message)
		}
		b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "main"}).DoRaw(context.Background())
		logs = string(b)
		return err == nil && strings.Contains(logs, "msgmax="), fmt.Sprintf("%s logs %q err %v", podSummary(p), logs, err)
	})
	if want := "msgmax=65536 range=20000 30000 shm=1"; !strings.Contains(logs, want) {
		t.Errorf("container saw %q, want %q", logs, want)
	}
}

// A pod for another OS is refused with kubelet's reason and message.
func TestAdmissionPodOS(t *testing.T) {
	ns := namespace(t)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "windows", Namespace: ns},
		Spec: v1.PodSpec{
			OS:         &v1.PodOS{Name: v1.Windows},
			Containers: []v1.Container{{Name: "main", Image: image, ImagePullPolicy: v1.PullNever}},
		},
	})
	waitRejected(t, pod, "PodOSNotSupported", "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS")
}
