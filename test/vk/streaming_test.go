package vk_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
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
	transport, upgrader, err := spdy.RoundTripperFor(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	url := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, "POST", url)
	stop, ready := make(chan struct{}), make(chan struct{})
	var out, errOut bytes.Buffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	fwErr := make(chan error, 1)
	go func() { fwErr <- fw.ForwardPorts() }()
	defer close(stop)
	select {
	case <-ready:
	case err := <-fwErr:
		t.Fatalf("port-forward: %v (%s)", err, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("port-forward not ready after 30s")
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("forwarded ports %v, %v", ports, err)
	}
	var body string
	waitFor(t, "the web server through port-forward", 20*time.Second, func() (bool, string) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(fmt.Sprintf("http://127.0.0.1:%d%s", ports[0].Local, path))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, want), resp.Status + " " + body
	})
	return body
}
