package vk_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeletGet does GET https://<vk-cri>/path with a client certificate
// (cert, key) and/or a bearer token, and returns the status and body.
func kubeletGet(t *testing.T, path string, cert []string, token string) (int, string) {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true} // the serving certificate is not what is tested here
	if cert != nil {
		c, err := tls.LoadX509KeyPair(cert[0], cert[1])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+kubeletAddr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

// TestKubeletAPIAuth checks the kubelet API's authentication and
// authorization as kubelet does them, against the real API server (whose
// authorizer is RBAC, as envtest configures it): no credentials → 401; a
// client certificate of --client-ca-file (the API server's own) → 200; one
// of another CA → 401; a ServiceAccount's token (TokenRequest API, checked
// by TokenReview) without RBAC → 403; once a ClusterRole grants
// nodes/proxy, the same token → 200 on /pods and past authorization on
// /containerLogs, while nodes/stats stays 403.
func TestKubeletAPIAuth(t *testing.T) {
	need(t)
	ctx := context.Background()

	if code, body := kubeletGet(t, "/pods", nil, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /pods without credentials: %d %.200s, want 401", code, body)
	}
	if code, body := kubeletGet(t, "/pods", nil, "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("GET /pods with a bad token: %d %.200s, want 401", code, body)
	}
	if code, body := kubeletGet(t, "/pods", kubeletClient[:], ""); code != http.StatusOK || !strings.Contains(body, `"kind":"PodList"`) {
		t.Errorf("GET /pods with the API server's client certificate: %d %.200s", code, body)
	}
	_, stranger, err := makeKubeletClientPKI(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := kubeletGet(t, "/pods", stranger[:], ""); code != http.StatusUnauthorized {
		t.Errorf("GET /pods with a certificate of another CA: %d %.200s, want 401", code, body)
	}

	// A ServiceAccount with no RBAC at all.
	ns := namespace(t)
	sa, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	for _, path := range []string{"/pods", "/stats/summary"} {
		if code, body := kubeletGet(t, path, nil, token); code != http.StatusForbidden {
			t.Errorf("GET %s with an unprivileged ServiceAccount's token: %d %.200s, want 403", path, code, body)
		}
	}

	// Grant it nodes/proxy on this node only.
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-node-proxy"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"nodes/proxy"}, ResourceNames: []string{nodeName},
			Verbs: []string{"get", "create"},
		}},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = client.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	// vk-cri keeps a denial for 30 s, as kubelet does: the same token is
	// let in once that has run out.
	granted := time.Now()
	waitFor(t, "the granted token let in", 50*time.Second, func() (bool, string) {
		code, body := kubeletGet(t, "/pods", nil, token)
		return code == http.StatusOK && strings.Contains(body, `"kind":"PodList"`), strings.TrimSpace(body)
	})
	t.Logf("token let in %v after the grant (denials are cached 30 s)", time.Since(granted).Round(100*time.Millisecond))
	// Past authorization, the handler answers for a pod that is not there.
	if code, body := kubeletGet(t, "/containerLogs/"+ns+"/nothing/c", nil, token); code == http.StatusUnauthorized || code == http.StatusForbidden {
		t.Errorf("GET /containerLogs with nodes/proxy granted: %d %.200s", code, body)
	}
	if code, body := kubeletGet(t, "/stats/summary", nil, token); code != http.StatusForbidden {
		t.Errorf("GET /stats/summary with only nodes/proxy granted: %d %.200s, want 403", code, body)
	}
}
