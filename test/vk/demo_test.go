package vk_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsclient "k8s.io/metrics/pkg/client/clientset/versioned"

	"github.com/cri-compose/cri-compose/test/toolcache"
)

// `make demo` is this suite's set-up (control plane, cri-compose, vk-cri)
// plus TestDemo, run from a test binary with -demo: one harness for the
// tests and the demo.
var demo = flag.Bool("demo", false, "run TestDemo, the demo of `make demo`: a sample pod on the whole stack, kept until Ctrl-C (DEMO_KEEP=0: torn down at once)")

// TestDemo runs a sample pod (a web server and a hello loop) on the
// cri-compose node and shows it as kubectl, crictl and Docker Compose see
// it; then it waits for Ctrl-C, unless DEMO_KEEP=0.
func TestDemo(t *testing.T) {
	if !*demo {
		t.Skip("the demo of `make demo` (-demo)")
	}
	need(t)
	// Ctrl-C (or SIGTERM) ends the demo at any step; the test's and the
	// suite's clean-ups then run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := os.Stdout
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	// The clients a user runs, built once per machine into the tool cache.
	say("Building kubectl, crictl and docker compose v2 (only the first run on a machine; cached in the user's cache dir)...")
	start := time.Now()
	var (
		wg                          sync.WaitGroup
		kubectl, crictl, compose    string
		kubectlErr, crictlErr, cErr error
	)
	wg.Go(func() { kubectl, _, kubectlErr = kubectlBinary(ctx, filepath.Join(repoRoot, "test", "vk", "tools")) })
	wg.Go(func() { crictl, _, crictlErr = toolcache.Crictl(ctx, repoRoot) })
	wg.Go(func() { compose, _, cErr = toolcache.Compose(ctx, repoRoot) })
	wg.Wait()
	for _, err := range []error{kubectlErr, crictlErr, cErr} {
		if err != nil {
			t.Fatal(err)
		}
	}
	dockerConfig := filepath.Join(runDir, "docker")
	if _, err := toolcache.InstallComposePlugin(ctx, dockerConfig, compose); err != nil {
		t.Fatal(err)
	}
	say("Tools ready in %v.", time.Since(start).Round(time.Second))

	// The sample pod.
	const ns = "demo"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web := busybox("web", `mkdir -p /www && echo "hello from $(hostname), a pod on cri-compose" > /www/index.html && exec httpd -f -p 8080 -h /www`)
	web.Ports = []v1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	hello := busybox("hello", `trap 'exit 0' TERM; while true; do echo "hello at $(date -u +%T)"; sleep 5; done`)
	grace := int64(5)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns, Labels: map[string]string{"app": "hello"}},
		Spec:       v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{web, hello}},
	})
	// The suite's clean-up deletes only its own namespaces' pods.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the demo pod: %v", err)
			return
		}
		waitFor(t, "the demo pod gone", time.Minute, func() (bool, string) {
			_, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			sbs := sandboxes(t, string(pod.UID))
			return apierrors.IsNotFound(err) && len(sbs) == 0, fmt.Sprintf("pod: %v, %d sandboxes", err, len(sbs))
		})
		say("Deleted pod %s/%s.", ns, pod.Name)
	})
	say("Created pod %s/%s on node %s; waiting for it to be Ready...", ns, pod.Name, nodeName)
	start = time.Now()
	var p *v1.Pod
	waitFor(t, "the demo pod Running and Ready", 2*time.Minute, func() (bool, string) {
		if ctx.Err() != nil {
			t.Fatal("interrupted")
		}
		p = getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue && p.Status.PodIP != "", podSummary(p)
	})
	say("Running and Ready in %v.", time.Since(start).Round(time.Millisecond))

	kubeconfig := filepath.Join(runDir, "kubeconfig")
	criEndpoint := "unix://" + criSock
	// crictl reads /etc/crictl.yaml (or warns); this one names the socket.
	crictlConfig := filepath.Join(runDir, "crictl.yaml")
	if err := os.WriteFile(crictlConfig, []byte("runtime-endpoint: "+criEndpoint+"\nimage-endpoint: "+criEndpoint+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, bin string, args ...string) {
		shown := filepath.Base(bin)
		switch {
		case strings.HasPrefix(shown, "kubectl"):
			shown = "kubectl"
		case strings.HasPrefix(shown, "crictl"):
			shown = "crictl"
		}
		say("\n$ %s %s", shown, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		b, err := cmd.CombinedOutput()
		out.Write(b)
		if err != nil {
			t.Errorf("%s %s: %v", bin, strings.Join(args, " "), err)
		}
	}
	kubeEnv := append(os.Environ(), "KUBECONFIG="+kubeconfig)
	run(kubeEnv, kubectl, "get", "pods", "-o", "wide", "-n", ns)
	run(os.Environ(), crictl, "--config", crictlConfig, "pods")
	run(toolcache.DockerEnv(dockerConfig), "docker", "compose", "ls")
	run(kubeEnv, kubectl, "logs", "-n", ns, pod.Name, "-c", "hello")
	// The pod's address is on cri-compose's Docker network, which the host
	// reaches.
	say("\n$ curl http://%s:8080/", p.Status.PodIP)
	if b, err := httpGet("http://" + p.Status.PodIP + ":8080/"); err != nil {
		t.Errorf("the demo's web server: %v", err)
	} else {
		out.Write(b)
	}

	// kubectl top, through a real metrics-server that scrapes the node.
	say("\nStarting metrics-server for kubectl top (it needs two scrapes, 10 s apart)...")
	startMetricsServer(t)
	mc, err := metricsclient.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the demo pod's metrics", 2*time.Minute, func() (bool, string) {
		if ctx.Err() != nil {
			t.Fatal("interrupted")
		}
		pm, err := mc.MetricsV1beta1().PodMetricses(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pm.Containers) == 2, fmt.Sprintf("%+v", pm.Containers)
	})
	run(kubeEnv, kubectl, "top", "pod", "-n", ns, "--containers")
	run(kubeEnv, kubectl, "top", "node", nodeName)

	say(`
The stack: kube-apiserver + etcd (on loopback), vk-cri (node %s), cri-compose (%s), Docker Engine.
Try, in another terminal:
  export KUBECONFIG=%s
  %s get pods -A -o wide
  %s logs -n %s %s -c hello -f
  %s exec -n %s %s -c web -- wget -qO- localhost:8080
  %s top pod -n %s
  %s --config %s ps
  DOCKER_CONFIG=%s docker compose ls
  docker ps --filter label=com.docker.compose.project`,
		nodeName, criEndpoint, kubeconfig, kubectl, kubectl, ns, pod.Name, kubectl, ns, pod.Name, kubectl, ns,
		crictl, crictlConfig, dockerConfig)

	if os.Getenv("DEMO_KEEP") == "0" {
		say("\nDEMO_KEEP=0: tearing everything down.")
		return
	}
	say("\nPress Ctrl-C to stop it all (the pods, vk-cri, cri-compose and the control plane) and clean up.")
	<-ctx.Done()
	say("\nStopping: deleting the pods, then vk-cri, cri-compose and the control plane...")
}

// httpClient makes a connection per request: kube-proxy balances
// connections, not requests (networking_flow_test.go asks a Service
// through it).
var httpClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func httpGet(url string) ([]byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
	}
	return b, err
}
