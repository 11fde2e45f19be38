package vk_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/suite"
)

// TestStateDirFull: a second node, its vk-cri's state dir on a small
// filesystem that fills. A pod with a configMap volume cannot have its
// files written: as with kubelet, a FailedMount event says
// "MountVolume.SetUp failed for volume ..." with the reason, and the pod
// waits in ContainerCreating with no sandbox made. Once there is room the
// pod starts by itself and reads its configMap.
func TestStateDirFull(t *testing.T) {
	need(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a small filesystem needs root")
	}
	t.Parallel()
	dir := filepath.Join(runDir, "full-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	state := filepath.Join(dir, "vk-state")
	suite.Tmpfs(t, state, "4m")

	node := "vk-e2e-full-" + runID
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "vk-cri.log")
	stop, err := startProcess(log, filepath.Join(runDir, "bin", "vk-cri"),
		"--kubeconfig", mustNodeKubeconfig(t, node), "--nodename", node,
		"--cri-endpoint", "unix://"+criSock,
		"--listen-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--client-ca-file", kubeletCACert, "--node-ip", "127.0.0.1",
		"--state-dir", state, "--pods", "5", "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteNodePods(node)
		stop()
		checkNoRace(t, "vk-cri", log)
		if t.Failed() {
			t.Logf("vk-cri log:\n%s", tail(log, 40))
		}
	})
	if err := waitNodeReady(node, time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, tail(log, 40))
	}

	// The node runs; now its state dir fills.
	filler := filepath.Join(state, "filler")
	suite.FillDisk(t, filler)

	ns := namespace(t)
	ctx := context.Background()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: ns}, Data: map[string]string{"greeting": "hello from a configMap"}}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := busybox("app", "cat /etc/settings/greeting; echo; exec sleep 3600") // the line ends: the engine holds back an unfinished one
	c.VolumeMounts = []v1.VolumeMount{{Name: "settings", MountPath: "/etc/settings"}}
	grace := int64(1)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: ns},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{c}, TerminationGracePeriodSeconds: &grace,
			Volumes: []v1.Volume{{Name: "settings", VolumeSource: v1.VolumeSource{
				ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}}}},
	})
	start := time.Now()
	want := `MountVolume.SetUp failed for volume "settings" : `
	var msg string
	waitFor(t, "a FailedMount event", time.Minute, func() (bool, string) {
		evs, err := client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name + ",reason=FailedMount"})
		if err != nil || len(evs.Items) == 0 {
			return false, fmt.Sprint("no FailedMount event ", err)
		}
		e := evs.Items[0]
		msg = e.Message
		return e.Type == v1.EventTypeWarning && strings.HasPrefix(msg, want) && strings.Contains(msg, "no space left on device"), msg
	})
	t.Logf("FailedMount %v after the pod was created: %s", time.Since(start).Round(time.Millisecond), msg)
	// The event and the status patch are separate writes, in no fixed
	// order (kubelet's are too), so the status may lag the event.
	var p *v1.Pod
	waitFor(t, "the pod Pending, app waiting in ContainerCreating", 30*time.Second, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		cs := containerStatus(p, "app")
		return p.Status.Phase == v1.PodPending && cs != nil && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating", podSummary(p)
	})
	if sbs := sandboxes(t, string(p.UID)); len(sbs) != 0 {
		t.Errorf("%d sandboxes made for a pod whose volume could not be set up", len(sbs))
	}

	// Room again: the pod starts by itself (at its next try, after
	// back-off) and has its configMap.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	waitFor(t, "the pod Running and Ready once there is room", 2*time.Minute, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue, podSummary(p)
	})
	t.Logf("the pod was Ready %v after room was made", time.Since(freed).Round(time.Millisecond))
	waitFor(t, "the configMap's greeting in the app's log", 30*time.Second, func() (bool, string) {
		b, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "app"}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), "hello from a configMap"), fmt.Sprintf("%q (%v)", b, err)
	})
	deletePod(t, ns, pod.Name, time.Minute)
}

// deleteNodePods deletes the pods bound to node and waits (bounded) until
// its vk-cri has removed them.
func deleteNodePods(node string) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	pods, err := client.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		_ = client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
	}
	for ctx.Err() == nil {
		pods, err := client.CoreV1().Pods("").List(ctx, sel)
		if err != nil || len(pods.Items) == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
