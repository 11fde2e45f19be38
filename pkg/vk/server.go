package vk

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// Handler is the kubelet API: logs and the pod list through
// virtual-kubelet's handlers, exec, attach and port-forward proxied to the
// runtime (streaming.go), the pods the runtime runs (runningpods.go).
//
// It serves anyone who reaches it: the caller puts it behind WithAuth
// (auth.go), as kubelet puts its server behind its auth filter.
func (p *Provider) Handler(pods corev1listers.PodLister) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/", p.ServeExec)
	mux.HandleFunc("/attach/", p.ServeAttach)
	mux.HandleFunc("/portForward/", p.ServePortForward)
	mux.HandleFunc("/runningpods/", p.ServeRunningPods) // runningpods.go
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.Handle("/metrics", p.MetricsHandler()) // vk-cri's own, as kubelet's /metrics (metrics.go)
	mux.Handle("/", api.PodHandler(api.PodHandlerConfig{
		GetContainerLogs:   p.GetContainerLogs,
		GetPods:            p.GetPods,
		GetStatsSummary:    p.GetStatsSummary,
		GetMetricsResource: p.GetMetricsResource,
		GetPodsFromKubernetes: func(context.Context) ([]*v1.Pod, error) {
			return pods.List(labels.Everything())
		},
	}, false))
	return mux
}

// TLSConfig is the kubelet API's TLS: the serving certificate from
// certFile/keyFile, or a self-signed one for the node's name and IPs
// (kept under dir so that it survives restarts). With clientCAFile,
// clients are asked for a certificate but not made to give one, as
// kubelet does: the authenticator (auth.go) verifies it against the CA,
// and a caller without one may still bring a bearer token.
func TLSConfig(certFile, keyFile, clientCAFile, dir, nodeName string, ips []string) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if certFile != "" || keyFile != "" {
		cert, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
	} else if cert, err = selfSigned(dir, nodeName, ips); err != nil {
		return nil, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if clientCAFile != "" {
		pemBytes, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("client CA %s: no certificate", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequestClientCert
	}
	return cfg, nil
}

// selfSigned loads dir/kubelet.crt and .key when they cover nodeName and
// ips and are valid for another day, and otherwise makes and keeps new ones.
func selfSigned(dir, nodeName string, ips []string) (tls.Certificate, error) {
	crtPath, keyPath := filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	if c, err := tls.LoadX509KeyPair(crtPath, keyPath); err == nil && c.Leaf != nil && covers(c.Leaf, nodeName, ips) &&
		time.Until(c.Leaf.NotAfter) > 24*time.Hour {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: nodeName + "@" + fmt.Sprint(time.Now().Unix())},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{nodeName, "localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	for _, ip := range ips {
		if a := net.ParseIP(ip); a != nil && !a.Equal(net.ParseIP("127.0.0.1")) {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	crtPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.MkdirAll(dir, 0o700); err == nil {
		err = errors.Join(os.WriteFile(keyPath, keyPEM, 0o600), os.WriteFile(crtPath, crtPEM, 0o644))
		if err != nil {
			return tls.Certificate{}, err
		}
	}
	return tls.X509KeyPair(crtPEM, keyPEM)
}

func covers(c *x509.Certificate, name string, ips []string) bool {
	if !slices.Contains(c.DNSNames, name) {
		return false
	}
	for _, ip := range ips {
		a := net.ParseIP(ip)
		if !slices.ContainsFunc(c.IPAddresses, a.Equal) {
			return false
		}
	}
	return true
}
