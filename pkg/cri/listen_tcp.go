package cri

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc/credentials"
)

// TCPTLS names the files of the optional TCP listener (--listen-tcp): the
// server's certificate and key, and the CA bundle that client certificates
// must chain to.
type TCPTLS struct {
	CertFile     string
	KeyFile      string
	ClientCAFile string
}

// ErrTCPNeedsMutualTLS is why a TCP listener without all three files is
// refused: the CRI is root on the node, so over TCP it is served to
// authenticated clients only.
var ErrTCPNeedsMutualTLS = errors.New("the TCP listener serves mutual TLS only: it needs --tls-cert-file, --tls-private-key-file and --client-ca-file")

// TCPCredentials are the gRPC server credentials of the TCP listener:
// TLS 1.2 or later, and a client certificate signed by the client CA
// required on every connection.
func TCPCredentials(f TCPTLS) (credentials.TransportCredentials, error) {
	if f.CertFile == "" || f.KeyFile == "" || f.ClientCAFile == "" {
		return nil, ErrTCPNeedsMutualTLS
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("TCP listener: server certificate: %w", err)
	}
	pem, err := os.ReadFile(f.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("TCP listener: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TCP listener: client CA %s holds no PEM certificate", f.ClientCAFile)
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}), nil
}

// ListenTCP opens the TCP listener at host:port (port 0: a free one).
func ListenTCP(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen tcp %s: %w", addr, err)
	}
	return l, nil
}
