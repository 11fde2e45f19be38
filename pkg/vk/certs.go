package vk

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"
)

// ServingCertManager is kubelet's --rotate-server-certificates: it asks
// the cluster for the kubelet API's serving certificate through a
// certificates.k8s.io/v1 CSR with signer kubernetes.io/kubelet-serving,
// subject O=system:nodes CN=system:node:<node> and the node's names and
// IPs as SANs, waits for someone to approve it and the signer to issue
// it, keeps it under dir (kubelet-server-current.pem, as kubelet does)
// and asks for the next one at 70–90% of its lifetime (jittered).
// client-go's certificate manager does all of that; kubelet uses the
// same. Call Start on the result.
//
// The API server takes such a CSR from any user allowed to create CSRs,
// but approvers (kube-controller-manager approves no serving
// certificates; kubelet-csr-approver and the like do) check that the
// requester is system:node:<node> in group system:nodes: the client
// should carry the node's identity.
func ServingCertManager(client kubernetes.Interface, nodeName string, hostnames, ips []string, dir string) (certificate.Manager, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	store, err := certificate.NewFileStore("kubelet-server", dir, dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("certificate store: %w", err)
	}
	tmpl := &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		DNSNames: hostnames,
	}
	for _, ip := range ips {
		if a := net.ParseIP(ip); a != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a)
		}
	}
	if len(tmpl.DNSNames) == 0 && len(tmpl.IPAddresses) == 0 {
		return nil, errors.New("serving certificate: no names or addresses for the node")
	}
	return certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		Template:    tmpl,
		SignerName:  certificatesv1.KubeletServingSignerName,
		// kubelet's: digital signature and server auth, and key
		// encipherment for an RSA key (the manager makes ECDSA keys).
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Name:             "kubelet-serving",
	})
}

// ServeRotated makes cfg serve the manager's current certificate, and the
// one cfg had (self-signed or given) until the cluster has issued one, so
// that the API answers from the start; callers that verify the node's
// certificate (the API server with --kubelet-certificate-authority) fail
// until then.
func ServeRotated(cfg *tls.Config, m certificate.Manager) {
	var fallback *tls.Certificate
	if len(cfg.Certificates) > 0 {
		fallback = &cfg.Certificates[0]
	}
	// crypto/tls asks GetCertificate only when Certificates is empty or
	// the client sent SNI, and callers by IP send none.
	cfg.Certificates = nil
	var logged atomic.Bool
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := m.Current(); c != nil {
			return c, nil
		}
		if fallback == nil {
			return nil, errors.New("no serving certificate issued yet")
		}
		if !logged.Swap(true) {
			klog.InfoS("Serving the fallback certificate until the CSR for the serving certificate is approved and issued")
		}
		return fallback, nil
	}
}
