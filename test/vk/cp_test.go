package vk_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/images"
)

// TestKubectlCp: the real kubectl copies a 3 MiB file of random bytes into
// a pod and back out (a tar stream over exec, through the API server,
// vk-cri's kubelet API and the runtime's streaming server), byte for byte.
func TestKubectlCp(t *testing.T) {
	need(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	kubectl, took, err := kubectlBinary(ctx, filepath.Join(repoRoot, "test", "vk", "tools"))
	if err != nil {
		images.SkipOrFail(t, "kubectl: %v", err)
	}
	if took > 0 {
		t.Logf("built %s in %v (cached for later runs)", kubectl, took.Round(time.Second))
	}
	ns := namespace(t)
	zero := int64(0)
	createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Containers: []v1.Container{busybox("c", "while true; do sleep 1; done")}},
	})
	waitFor(t, "pod cp Running", time.Minute, func() (bool, string) {
		p := getPod(t, ns, "cp")
		return p.Status.Phase == v1.PodRunning, podSummary(p)
	})

	dir := t.TempDir()
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	in, out := filepath.Join(dir, "in.bin"), filepath.Join(dir, "out.bin")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", filepath.Join(runDir, "kubeconfig"), "-n", ns}, args...)...)
		cmd.Dir = dir // kubectl cp takes "ns/pod:path"; local paths are plain
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	start := time.Now()
	run("cp", in, "cp:/tmp/data.bin", "-c", "c")
	if got := strings.TrimSpace(run("exec", "cp", "-c", "c", "--", "wc", "-c", "/tmp/data.bin")); !strings.HasPrefix(got, strconv.Itoa(len(data))+" ") {
		t.Fatalf("in the pod: wc -c says %q, want %d bytes", got, len(data))
	}
	run("cp", "cp:/tmp/data.bin", out, "-c", "c")
	back, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatalf("kubectl cp round trip: %d bytes back, want the %d written, byte for byte", len(back), len(data))
	}
	t.Logf("kubectl cp of %d bytes into the pod and back in %v", len(data), time.Since(start).Round(time.Millisecond))
}
