package vk

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestRunningPods(t *testing.T) {
	e := newTestEnv(t)
	w := newPodWorker(e.p, testPod())
	w.pass(context.Background())
	e.exit(t, "init", 0)
	w.pass(context.Background())
	e.exit(t, "b", 1) // exited: not listed

	h := e.p.Handler(nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/runningpods/", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /runningpods/: %d %s %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var list v1.PodList
	if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" || len(list.Items) != 1 {
		t.Fatalf("list %s", rec.Body)
	}
	pod := list.Items[0]
	if pod.Name != "p" || pod.Namespace != "ns" || pod.UID != "uid-1" || len(pod.Spec.Containers) != 1 ||
		pod.Spec.Containers[0].Name != "a" || pod.Spec.Containers[0].Image != "busybox" {
		t.Errorf("pod %s", rec.Body)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/runningpods/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/runningpods/x", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /runningpods/x: %d", rec.Code)
	}
}
