package vk_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestServingCertificateCSR runs a second vk-cri (its own node name, port
// and state dir; the same cri-compose) with --rotate-server-certificates
// against a second API server that verifies kubelets' serving
// certificates (--kubelet-certificate-authority). The shared API server
// does not get that flag: the suite's other vk-cri processes serve
// self-signed certificates, as a node does before it has one.
//
// There is no kube-controller-manager here, so the test is approver and
// signer: it approves the node's kubernetes.io/kubelet-serving CSR and
// signs it with its own cluster signing CA, the one the API server trusts
// for kubelets. Then the node serves the issued certificate, the API
// server reaches it for pods/log with verification on (kubectl logs
// without --insecure-skip-tls-verify-backend), and the
// node asks for the next certificate at 70–90% of the first one's
// lifetime and serves it once issued.
func TestServingCertificateCSR(t *testing.T) {
	need(t)
	ctx := context.Background()
	dir := filepath.Join(runDir, "csr")
	ca, err := newSigningCA(filepath.Join(dir, "pki"), "vk-e2e-cluster-signing-ca")
	if err != nil {
		t.Fatal(err)
	}

	env2 := &envtest.Environment{BinaryAssetsDirectory: filepath.Join(runDir, "assets"), ControlPlaneStartTimeout: time.Minute}
	args := env2.ControlPlane.GetAPIServer().Configure()
	args.Set("kubelet-client-certificate", kubeletClient[0])
	args.Set("kubelet-client-key", kubeletClient[1])
	args.Set("kubelet-preferred-address-types", "InternalIP")
	args.Set("kubelet-certificate-authority", ca.path)
	cfg2, err := env2.Start()
	if err != nil {
		t.Fatalf("second control plane: %v", err)
	}
	t.Cleanup(func() { _ = env2.Stop() })
	c2, err := kubernetes.NewForConfig(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env2.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	node := nodeName + "-csr"
	log := filepath.Join(dir, "vk-cri.log")
	stop, err := startProcess(log, filepath.Join(runDir, "bin", "vk-cri"),
		"--kubeconfig", kubeconfig, "--nodename", node, "--cri-endpoint", "unix://"+criSock,
		"--listen-address", addr, "--client-ca-file", kubeletCACert, "--node-ip", "127.0.0.1",
		"--state-dir", filepath.Join(dir, "state"), "--rotate-server-certificates", "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	// The suite's own cleanup sweeps containers by namespace prefix.
	ns := "vke2e-" + runID + "-csr"
	if _, err := c2.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The node removes its pods from the runtime before it stops.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c2.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		for ctx.Err() == nil {
			sbs, err := cri.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"vk-cri.cri-compose.io/node": node}})
			if err != nil || len(sbs) == 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		stop()
		checkNoRace(t, "vk-cri", log)
		if t.Failed() {
			t.Logf("second vk-cri's log:\n%s", tail(log, 40))
		}
	})

	// The node asks; the API server takes the CSR from its client (here
	// an admin; a real node's identity is system:node:<name>).
	first := waitCSR(t, c2, node, "")
	if first.Spec.Username == "" || !slices.Contains(first.Spec.Usages, certificatesv1.UsageServerAuth) {
		t.Errorf("CSR %s: user %q, usages %v", first.Name, first.Spec.Username, first.Spec.Usages)
	}
	waitFor(t, "node "+node+" Ready", time.Minute, func() (bool, string) {
		n, err := c2.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprint(n.Status.Conditions)
	})
	// A pod whose log the API server fetches from the node (the node
	// proxy refuses loopback addresses; pods/log does not).
	zero := int64(0)
	pod, err := c2.CoreV1().Pods(ns).Create(ctx, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-logs"},
		Spec: v1.PodSpec{
			NodeName: node, TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken: new(bool),
			Containers:                   []v1.Container{busybox("c", `echo verified-backend; while true; do sleep 1; done`)},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+pod.Name+" Running", time.Minute, func() (bool, string) {
		p, err := c2.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == v1.PodRunning, string(p.Status.Phase)
	})
	logs := c2.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "c"})

	// Before the certificate is issued the node serves its self-signed
	// one, which the API server refuses.
	// The API server's reason is in the body.
	if body, err := logs.DoRaw(ctx); err == nil || !strings.Contains(string(body), "x509: certificate signed by unknown authority") {
		t.Fatalf("kubectl logs before the certificate is issued: %v %.300s, want an x509 error", err, body)
	} else {
		t.Logf("before issuance the API server refuses the node: %.300s", body)
	}

	issued := time.Now()
	lifetime := 40 * time.Second
	notBefore := issued.Add(-5 * time.Second)
	approveAndSign(t, c2, ca, first, 2, notBefore, notBefore.Add(lifetime))
	waitServing(t, addr, ca, 2)
	t.Logf("CSR %s approved and signed; served after %v", first.Name, time.Since(issued).Round(10*time.Millisecond))

	// kubectl logs, the API server verifying the node's certificate.
	if body, err := logs.DoRaw(ctx); err != nil || !strings.Contains(string(body), "verified-backend") {
		t.Fatalf("kubectl logs with the issued certificate: %v %.200s", err, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "pki", "kubelet-server-current.pem")); err != nil {
		t.Errorf("certificate store: %v", err)
	}

	// Rotation: the next CSR comes at 70–90% of the 40 s lifetime.
	second := waitCSR(t, c2, node, first.Name)
	at := second.CreationTimestamp.Sub(notBefore)
	t.Logf("next CSR %s at %v of the %v lifetime (%.0f%%)", second.Name, at, lifetime, 100*at.Seconds()/lifetime.Seconds())
	// Creation timestamps have whole seconds.
	if at < lifetime*7/10-time.Second || at > lifetime*9/10+time.Second {
		t.Errorf("renewal at %v, want 70–90%% of %v", at, lifetime)
	}
	approveAndSign(t, c2, ca, second, 3, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	waitServing(t, addr, ca, 3)
	if body, err := logs.DoRaw(ctx); err != nil || !strings.Contains(string(body), "verified-backend") {
		t.Errorf("kubectl logs with the renewed certificate: %v %.200s", err, body)
	}
}

// waitCSR waits for the node's kubelet-serving CSR other than skip, and
// checks what it asks for.
func waitCSR(t *testing.T, c kubernetes.Interface, node, skip string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var found *certificatesv1.CertificateSigningRequest
	waitFor(t, "a kubelet-serving CSR of "+node, time.Minute, func() (bool, string) {
		l, err := c.CertificatesV1().CertificateSigningRequests().List(context.Background(),
			metav1.ListOptions{FieldSelector: "spec.signerName=" + certificatesv1.KubeletServingSignerName})
		if err != nil {
			return false, err.Error()
		}
		for i := range l.Items {
			if l.Items[i].Name != skip {
				found = &l.Items[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d CSRs", len(l.Items))
	})
	block, _ := pem.Decode(found.Spec.Request)
	if block == nil {
		t.Fatalf("CSR %s: no PEM request", found.Name)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.CommonName != "system:node:"+node || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) ||
		!slices.Contains(req.DNSNames, node) || len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("CSR %s asks for %v, DNS %v, IPs %v", found.Name, req.Subject, req.DNSNames, req.IPAddresses)
	}
	return found
}

// approveAndSign does what an approver and kube-controller-manager's
// kubelet-serving signer would: approve, then write the certificate.
func approveAndSign(t *testing.T, c kubernetes.Interface, ca *signingCA, csr *certificatesv1.CertificateSigningRequest, serial int64, notBefore, notAfter time.Time) {
	t.Helper()
	ctx := context.Background()
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "VKE2E", Message: "approved by the vk e2e suite",
	})
	csr, err := c.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if csr.Status.Certificate, err = ca.sign(csr.Spec.Request, serial, notBefore, notAfter); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitServing waits until addr serves the certificate with this serial,
// verified against the signing CA for the IP it is dialled on.
func waitServing(t *testing.T, addr string, ca *signingCA, serial int64) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	waitFor(t, fmt.Sprintf("certificate %d served", serial), 30*time.Second, func() (bool, string) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		leaf := conn.ConnectionState().PeerCertificates[0]
		return leaf.SerialNumber.Int64() == serial, fmt.Sprintf("serial %v from %s", leaf.SerialNumber, leaf.Issuer)
	})
}
