package vk_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// makeKubeletClientPKI writes a CA and a client certificate signed by it
// (what a cluster's kubelet client CA and the API server's
// --kubelet-client-certificate are) into dir. It returns the CA's path and
// the client's certificate and key paths.
func makeKubeletClientPKI(dir string) (caPath string, client [2]string, err error) {
	ca, err := newSigningCA(dir, "vk-e2e-client-ca")
	if err != nil {
		return "", client, err
	}
	client[0], client[1], err = ca.issue(dir, "kubelet-client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return ca.path, client, err
}

// signingCA is a test CA: the kubelet client CA, the front proxy's CA,
// or one that signs kubelet serving certificates in the role of
// kube-controller-manager's --cluster-signing-cert-file.
type signingCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	path string // its certificate, PEM
}

func newSigningCA(dir, name string) (*signingCA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	return &signingCA{cert: cert, key: key, path: path}, nil
}

// issue signs a new key's certificate with tmpl's subject, names and
// extended key usages, valid for a day, and writes it and its key into
// dir as name.crt and name.key.
func (ca *signingCA) issue(dir, name string, tmpl *x509.Certificate) (crtPath, keyPath string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	t := *tmpl
	t.SerialNumber = serial
	t.NotBefore, t.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	t.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, &t, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	crtPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	return crtPath, keyPath, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

// sign issues the certificate a kubelet-serving CSR (PEM) asks for, valid
// from notBefore to notAfter, as the kubelet-serving signer would: the
// request's subject and names, server auth.
func (ca *signingCA) sign(csrPEM []byte, serial int64, notBefore, notAfter time.Time) ([]byte, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, fmt.Errorf("CSR: no PEM block")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, err
	}
	if err := req.CheckSignature(); err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: req.Subject,
		DNSNames: req.DNSNames, IPAddresses: req.IPAddresses,
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
