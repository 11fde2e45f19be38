package registry

import "testing"

func TestMirrorPath(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/e2e-test-images/busybox:1.29-2":          "e2e-test-images/busybox:1.29-2",
		"gcr.io/k8s-staging-cri-tools/test-image-1:latest":        "k8s-staging-cri-tools/test-image-1:latest",
		"registry.k8s.io/pause:3.9":                               "pause:3.9",
		"k8s.gcr.io/pause:3.9":                                    "pause:3.9",
		"gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64:latest": "k8s-staging-cri-tools/hostnet-nginx-amd64:latest",
	} {
		got, err := MirrorPath(ref)
		if err != nil || got != want {
			t.Errorf("MirrorPath(%q) = %q, %v; want %q", ref, got, err, want)
		}
	}
}
