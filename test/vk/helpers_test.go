package vk_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/test/suite"
)

// waitFor polls cond until it holds, failing t after d with cond's last
// word on why not, and vk-cri's log.
func waitFor(t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	if err := suite.Poll(what, d, cond); err != nil {
		t.Fatalf("%v\nvk-cri log:\n%s", err, tail(vkLog, 40))
	}
}

func waitNodeReady(name string, d time.Duration) error {
	return suite.Poll("node "+name+" Ready", d, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, c.Reason + ": " + c.Message
			}
		}
		return false, "no Ready condition"
	})
}

// namespace makes a namespace for t.
func namespace(t *testing.T) string {
	t.Helper()
	name := strings.ToLower("vke2e-" + runID + "-" + strings.ReplaceAll(t.Name(), "/", "-"))
	if len(name) > 63 {
		name = name[:63]
	}
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// busybox is a container of the test image running sh -c script.
func busybox(name, script string) v1.Container {
	return v1.Container{
		Name: name, Image: image, ImagePullPolicy: v1.PullNever,
		Command: []string{"sh", "-c", script},
	}
}

// createPod binds pod to the node (there is no scheduler), unless it names
// one, and creates it.
func createPod(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	if pod.Spec.NodeName == "" {
		pod.Spec.NodeName = nodeName
	}
	created, err := client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return created
}

func getPod(t *testing.T, ns, name string) *v1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p
}

// sandboxes lists cri-compose's sandboxes of the pod with uid.
func sandboxes(t *testing.T, uid string) []*runtimeapi.PodSandbox {
	t.Helper()
	return sandboxesOf(t, cri, uid)
}

// sandboxesOf lists rt's sandboxes of the pod with uid.
func sandboxesOf(t *testing.T, rt internalapi.RuntimeService, uid string) []*runtimeapi.PodSandbox {
	t.Helper()
	// A runtime just restarted answers Unavailable until it has read its
	// pods from the engine again; kubelet retries it, and so does this.
	var sbs []*runtimeapi.PodSandbox
	var err error
	_ = suite.Poll("the runtime available", 30*time.Second, func() (bool, string) {
		sbs, err = rt.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{
			LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
		})
		return status.Code(err) != codes.Unavailable, fmt.Sprint(err)
	})
	if err != nil {
		t.Fatalf("CRI ListPodSandbox: %v", err)
	}
	return sbs
}

func condition(p *v1.Pod, t v1.PodConditionType) v1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

func containerStatus(p *v1.Pod, name string) *v1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	for i := range p.Status.InitContainerStatuses {
		if p.Status.InitContainerStatuses[i].Name == name {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

func podSummary(p *v1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ip=%s", p.Status.Phase, p.Status.PodIP)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s", c.Type, c.Status)
	}
	for _, cs := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, " [%s ready=%v restarts=%d", cs.Name, cs.Ready, cs.RestartCount)
		switch {
		case cs.State.Running != nil:
			b.WriteString(" running")
		case cs.State.Waiting != nil:
			fmt.Fprintf(&b, " waiting %s %q", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			fmt.Fprintf(&b, " terminated %d %s", cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
		}
		b.WriteString("]")
	}
	return b.String()
}

// deletePod deletes the pod and waits up to d until the API server has it
// no more (vk-cri has removed it); it returns how long that took.
func deletePod(t *testing.T, ns, name string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod gone", d, func() (bool, string) {
		_, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	return time.Since(start)
}

// hostDataVolume makes the folder name under the run's folder and returns
// it with a hostPath volume "data" of it, where a test's containers leave
// what the test reads (hooks and stop order).
func hostDataVolume(t *testing.T, name string) (string, v1.Volume) {
	t.Helper()
	dir := filepath.Join(runDir, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	dirType := v1.HostPathDirectory
	return dir, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: dir, Type: &dirType}}}
}

// checkNoRace fails t if the log of a -race build (who, at path) reports
// a data race, and shows the start of the report.
func checkNoRace(t *testing.T, who, path string) {
	t.Helper()
	b, _ := os.ReadFile(path)
	if i := bytes.Index(b, []byte("WARNING: DATA RACE")); i >= 0 {
		t.Errorf("%s reported a data race:\n%s", who, b[i:min(len(b), i+8000)])
	}
}
