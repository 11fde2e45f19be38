package vk_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GET /runningpods/ lists a running pod, from the runtime, as kubelet's,
// behind the kubelet API's authentication and authorization. It is asked
// with the API server's kubelet client certificate, as the node proxy
// would: the API server's proxy refuses the suite's node address
// (127.0.0.1, "address not allowed").
func TestRunningPods(t *testing.T) {
	ns := namespace(t)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "running", Namespace: ns},
		Spec:       v1.PodSpec{Containers: []v1.Container{busybox("main", "sleep 3600")}},
	})
	waitFor(t, "pod Running", 90*time.Second, func() (bool, string) {
		p := getPod(t, ns, pod.Name)
		return p.Status.Phase == v1.PodRunning, podSummary(p)
	})
	if code, body := kubeletGet(t, "/runningpods/", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /runningpods/ without credentials: %d %.200s, want 401", code, body)
	}
	code, body := kubeletGet(t, "/runningpods/", kubeletClient[:], "")
	if code != http.StatusOK {
		t.Fatalf("GET /runningpods/: %d %.300s", code, body)
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("%v: %.300s", err, body)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" {
		t.Errorf("kind %q apiVersion %q", list.Kind, list.APIVersion)
	}
	for _, p := range list.Items {
		if p.UID != pod.UID {
			continue
		}
		if p.Name != pod.Name || p.Namespace != ns || len(p.Spec.Containers) != 1 ||
			p.Spec.Containers[0].Name != "main" || p.Spec.Containers[0].Image == "" {
			t.Errorf("listed as %+v", p)
		}
		return
	}
	t.Errorf("pod %s not in /runningpods/: %.1000s", pod.UID, body)
}
