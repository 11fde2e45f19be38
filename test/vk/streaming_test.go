package vk_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/cri-compose/cri-compose/test/forward"
)

// TestPortForwardAndAttach reaches a web server in a pod through
// port-forward, and attaches to a container's output, both through the API
// server, vk-cri's kubelet API and the runtime's streaming server.
func TestPortForwardAndAttach(t *testing.T) {
	need(t)
	ns := namespace(t)
	zero := int64(0)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []v1.Container{
				busybox("httpd", `mkdir -p /www && echo hello-through-port-forward > /www/index.html && exec httpd -f -p 8080 -h /www`),
				busybox("ticker", `i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done`),
			},
		},
	})
	waitFor(t, "pod Ready", 60*time.Second, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		return condition(p, v1.PodReady) == v1.ConditionTrue, podSummary(p)
	})

	body := portForwardGet(t, ns, pod.Name, 8080, "/index.html", "hello-through-port-forward")
	t.Logf("through port-forward → pod:8080: %q", strings.TrimSpace(body))

	// Attach: the container's output as it comes.
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod.Name).SubResource("attach").
		VersionedParams(&v1.PodAttachOptions{Container: "ticker", Stdout: true, Stderr: true}, scheme.ParameterCodec)
	exec, err := remotecommand.NewSPDYExecutor(restConfig, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var stdout bytes.Buffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: io.Discard})
	if n := strings.Count(stdout.String(), "tick "); n < 3 {
		t.Errorf("attach for 2s gave %d ticks (err %v): %q", n, err, stdout.String())
	}
}

// portForwardGet forwards a local port to the pod's port through the API
// server (as kubectl port-forward does), GETs path until the body holds
// want, and returns the body.
func portForwardGet(t *testing.T, ns, pod string, port int, path, want string) string {
	t.Helper()
	url := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	d, err := forward.Dialer(restConfig, url.String())
	if err != nil {
		t.Fatal(err)
	}
	fw := forward.Start(t, d, port, 30*time.Second)
	defer fw.Close()
	var body string
	waitFor(t, "the web server through port-forward", 20*time.Second, func() (bool, string) {
		code, b, err := fw.Get(path)
		if err != nil {
			return false, err.Error()
		}
		body = b
		return strings.Contains(body, want), fmt.Sprintf("%d %s", code, body)
	})
	return body
}
