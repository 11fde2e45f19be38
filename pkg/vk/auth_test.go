package vk

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// testPKI makes a CA (written to dir/ca.crt) and a client certificate for
// user/groups signed by it.
func testPKI(t *testing.T, dir, user string, groups ...string) (caPath string, client tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject:   pkix.Name{CommonName: user, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPath = filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caPath, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestAuth drives the kubelet API's auth with a stand-in API server
// (TokenReview and SubjectAccessReview answered by rules) and checks the answers and
// the attributes asked about, which are kubelet's.
func TestAuth(t *testing.T) {
	dir := t.TempDir()
	caPath, cert := testPKI(t, dir, "kube-apiserver-kubelet-client", "system:masters")
	_, stranger := testPKI(t, t.TempDir(), "stranger")

	var mu sync.Mutex
	var asked []authorizationv1.ResourceAttributes
	// An API server that answers TokenReview and SubjectAccessReview only.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out any
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			if tr.Spec.Token == "good" {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "system:serviceaccount:ns:reader"}}
			}
			out = &tr
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(r.Body).Decode(&sar); err != nil || sar.Spec.ResourceAttributes == nil {
				http.Error(w, fmt.Sprint(err), 400)
				return
			}
			mu.Lock()
			asked = append(asked, *sar.Spec.ResourceAttributes)
			mu.Unlock()
			// The reader may use nodes/proxy only; masters anything.
			sar.Status.Allowed = slices.Contains(sar.Spec.Groups, "system:masters") ||
				(sar.Spec.User == "system:serviceaccount:ns:reader" && sar.Spec.ResourceAttributes.Subresource == "proxy")
			out = &sar
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer api.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := NewAuth(client, "node1", AuthConfig{ClientCAFile: caPath, TokenWebhook: true, Mode: AuthzWebhook})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(WithAuth(auth, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	defer srv.Close()

	do := func(method, path string, cert *tls.Certificate, token string) int {
		t.Helper()
		cfg := &tls.Config{InsecureSkipVerify: true}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path string
		cert         *tls.Certificate
		token        string
		want         int
		attrs        string // verb nodes/subresource name, as asked of the authorizer
	}{
		{"GET", "/pods", nil, "", 401, ""},
		{"GET", "/pods", &stranger, "", 401, ""},
		{"GET", "/pods", nil, "bad", 401, ""},
		{"GET", "/pods", &cert, "", 200, "get nodes/pods node1"},
		// Fine-grained first, then nodes/proxy, which the reader has.
		{"GET", "/pods", nil, "good", 200, "get nodes/pods node1, get nodes/proxy node1"},
		{"GET", "/healthz", nil, "good", 200, "get nodes/healthz node1"}, // nodes/proxy: cached
		{"GET", "/spec/", nil, "good", 403, "get nodes/spec node1"},
		{"GET", "/containerLogs/ns/p/c", nil, "good", 200, "get nodes/proxy node1"},
		{"POST", "/exec/ns/p/c", nil, "good", 200, "create nodes/proxy node1"},
		{"GET", "/stats/summary", nil, "good", 403, "get nodes/stats node1"},
		{"GET", "/metrics/resource", nil, "good", 403, "get nodes/metrics node1"},
		{"GET", "/logs/", nil, "good", 403, "get nodes/log node1"},
		{"GET", "/debug/pprof/heap", nil, "", 401, ""},
		{"GET", "/debug/pprof/heap", nil, "good", 200, "get nodes/proxy node1"}, // profiling.go
	} {
		mu.Lock()
		asked = nil
		mu.Unlock()
		if got := do(tc.method, tc.path, tc.cert, tc.token); got != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, got, tc.want)
		}
		mu.Lock()
		var said []string
		for _, a := range asked {
			said = append(said, a.Verb+" "+a.Resource+"/"+a.Subresource+" "+a.Name)
		}
		got := strings.Join(said, ", ")
		mu.Unlock()
		// A cached answer asks nothing: only the first of a kind is checked.
		if got != "" && got != tc.attrs {
			t.Errorf("%s %s: asked %q, want %q", tc.method, tc.path, got, tc.attrs)
		}
	}
}

// TestAuthModes checks the configurations kubelet's flags allow.
func TestAuthModes(t *testing.T) {
	if _, err := NewAuth(nil, "n", AuthConfig{Mode: "RBAC", Anonymous: true}); err == nil {
		t.Error("unknown mode accepted")
	}
	if _, err := NewAuth(nil, "n", AuthConfig{Mode: AuthzAlwaysAllow}); err == nil {
		t.Error("no way to authenticate accepted")
	}
	auth, err := NewAuth(nil, "n", AuthConfig{Mode: AuthzAlwaysAllow, Anonymous: true})
	if err != nil {
		t.Fatal(err)
	}
	if !(AuthConfig{Mode: AuthzAlwaysAllow, Anonymous: true}).Open() || (AuthConfig{Mode: AuthzWebhook, Anonymous: true}).Open() {
		t.Error("Open")
	}
	rec := httptest.NewRecorder()
	WithAuth(auth, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})).ServeHTTP(rec, httptest.NewRequest("GET", "/pods", nil))
	if rec.Code != 200 {
		t.Errorf("anonymous with AlwaysAllow: %d", rec.Code)
	}
}
