package vk

import (
	"crypto/tls"
	"testing"
)

type stubManager struct{ cert *tls.Certificate }

func (m *stubManager) Start()                    {}
func (m *stubManager) Stop()                     {}
func (m *stubManager) Current() *tls.Certificate { return m.cert }
func (m *stubManager) ServerHealthy() bool       { return true }

// TestServeRotated checks that the fallback certificate is served until
// the manager has one, then the manager's, also to clients without SNI.
func TestServeRotated(t *testing.T) {
	cfg, err := TLSConfig("", "", "", t.TempDir(), "node1", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	fallback := cfg.Certificates[0]
	m := &stubManager{}
	ServeRotated(cfg, m)
	if len(cfg.Certificates) != 0 {
		t.Fatal("static certificates left: GetCertificate would not be asked without SNI")
	}
	got, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || &got.Certificate[0][0] != &fallback.Certificate[0][0] {
		t.Fatalf("before issuance: %v, want the fallback", err)
	}
	issued := &tls.Certificate{Certificate: [][]byte{{1}}}
	m.cert = issued
	if got, _ := cfg.GetCertificate(&tls.ClientHelloInfo{}); got != issued {
		t.Error("after issuance: not the issued certificate")
	}
}
