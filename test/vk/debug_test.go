package vk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestEphemeralContainer: an ephemeral container added through the
// ephemeralcontainers subresource (what `kubectl debug --target` does)
// starts in the running pod, shares its target's PID namespace (ps shows
// the app's process), is reported in ephemeralContainerStatuses, takes
// stdin through attach, keeps its log, is not restarted once it exited (restartPolicy
// Always), and goes from the runtime with the pod.
func TestEphemeralContainer(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	zero := int64(0)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "debugged", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Containers: []v1.Container{busybox("app", "exec sleep 12345")}},
	})
	waitFor(t, "pod debugged Running", time.Minute, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodRunning, podSummary(p)
	})

	// The debug container reads one line from stdin, then shows the
	// processes it sees and exits.
	ec := v1.EphemeralContainer{
		EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: "debugger", Image: image, ImagePullPolicy: v1.PullNever,
			Command: []string{"sh", "-c", "read line; echo got $line; ps; echo done"},
			Stdin:   true, StdinOnce: true, TerminationMessagePolicy: v1.TerminationMessageReadFile,
		},
		TargetContainerName: "app",
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"ephemeralContainers": []v1.EphemeralContainer{ec}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "ephemeralcontainers"); err != nil {
		t.Fatalf("patch ephemeralcontainers: %v", err)
	}
	var running v1.ContainerStatus
	waitFor(t, "the ephemeral container Running", time.Minute, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		for _, cs := range p.Status.EphemeralContainerStatuses {
			running = cs
			return cs.Name == "debugger" && cs.State.Running != nil, podSummary(p) + " ephemeral: " + statusLine(cs)
		}
		return false, podSummary(p) + " no ephemeral container status"
	})
	if !strings.HasPrefix(running.ContainerID, "cri-compose://") || running.ImageID == "" || running.Image != image || running.Ready {
		t.Errorf("ephemeral container status %+v: want a cri-compose container id, an image id, image %s, not ready", running, image)
	}
	p := getPod(t, ns, pod.Name)
	if condition(p, v1.PodReady) != v1.ConditionTrue || len(p.Status.ContainerStatuses) != 1 {
		t.Errorf("pod with a debug container: %s, want Ready with its one app container", podSummary(p))
	}

	// Attach, send the line, and read what it sees.
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod.Name).SubResource("attach").
		VersionedParams(&v1.PodAttachOptions{Container: "debugger", Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(restConfig, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = exec.StreamWithContext(actx, remotecommand.StreamOptions{Stdin: strings.NewReader("hello\n"), Stdout: &stdout, Stderr: &stderr})
	out := stdout.String()
	if !strings.Contains(out, "got hello") || !strings.Contains(out, "sleep 12345") {
		t.Fatalf("attached to the debug container (err %v): stdout %q stderr %q; want the line back and the target's sleep 12345 in ps", err, out, stderr.String())
	}

	// It exits (0) and stays exited: never restarted.
	waitFor(t, "the ephemeral container Terminated", time.Minute, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		cs := p.Status.EphemeralContainerStatuses[0]
		return cs.State.Terminated != nil, statusLine(cs)
	})
	logs, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "debugger"}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "got hello") {
		t.Errorf("logs of the debug container (err %v): %q, want its output", err, logs)
	}
	uid := string(pod.UID)
	listDebugger := func() []*runtimeapi.Container {
		cs, err := cri.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: map[string]string{
			"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": "debugger"}})
		if err != nil {
			t.Fatalf("CRI ListContainers: %v", err)
		}
		return cs
	}
	// A restart would show within a couple of the worker's passes (it is
	// woken by the container's exit event): watch for one over 5 s.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cs := listDebugger(); len(cs) != 1 || cs[0].State != runtimeapi.ContainerState_CONTAINER_EXITED {
			t.Fatalf("after it exited, the runtime holds %d debugger containers (first %v), want the one exited", len(cs), cs)
		}
		p := getPod(t, ns, pod.Name)
		if cs := p.Status.EphemeralContainerStatuses[0]; cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.RestartCount != 0 {
			t.Fatalf("ephemeral container after it exited: %s, want terminated with 0 and no restart", statusLine(cs))
		}
		time.Sleep(500 * time.Millisecond) // sampling for a restart that must not come
	}

	// With grace 0 the API object may go before vk-cri has removed the
	// pod from the runtime: wait for that too.
	deletePod(t, ns, pod.Name, time.Minute)
	waitFor(t, "the debug container gone from the runtime", time.Minute, func() (bool, string) {
		cs := listDebugger()
		return len(cs) == 0, fmt.Sprintf("%d left", len(cs))
	})
}

func statusLine(cs v1.ContainerStatus) string {
	b, _ := json.Marshal(cs.State)
	return cs.Name + " " + string(b)
}
