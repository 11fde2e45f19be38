package vk_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
)

// metrics-server, as a cluster runs it for `kubectl top`: an aggregated
// API (v1beta1.metrics.k8s.io) behind the API server's front proxy, that
// scrapes every node's /metrics/resource on the node's address with the
// kubelet client certificate and verifies the node's serving certificate.

const metricsServerName = "metrics-server"

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// startMetricsServer builds (once per machine) and starts metrics-server
// and registers it with the API server; the test's clean-up undoes both.
func startMetricsServer(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin, took, err := metricsServerBinary(ctx, filepath.Join(repoRoot, "test", "vk", "tools"))
	if err != nil {
		t.Fatal(err)
	}
	if took > 0 {
		t.Logf("metrics-server built in %v (cold)", took.Round(time.Second))
	}
	// The aggregator reaches the endpoints of a Service, which may not be
	// loopback addresses: metrics-server listens on one of the machine's
	// own.
	ip, err := hostIP()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePortOn(ip)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(runDir, metricsServerName)
	ca, err := newSigningCA(dir, "metrics-server-ca")
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := ca.issue(dir, "serving", &x509.Certificate{
		Subject:     pkix.Name{CommonName: metricsServerName},
		DNSNames:    []string{metricsServerName + ".kube-system.svc"},
		IPAddresses: []net.IP{net.ParseIP(ip)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(runDir, "kubeconfig")
	logPath := filepath.Join(runDir, "metrics-server.log")
	stop, err := startProcess(logPath, bin,
		"--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
		"--bind-address", ip, "--secure-port", strconv.Itoa(port), "--tls-cert-file", crt, "--tls-private-key-file", key,
		// As a cluster's kubelets would be reached: by InternalIP, on the
		// port the node reports, the node's certificate verified (vk-cri's
		// self-signed one), with the API server's kubelet client identity.
		"--kubelet-preferred-address-types", "InternalIP", "--kubelet-use-node-status-port",
		"--kubelet-certificate-authority", filepath.Join(runDir, "vk-state", "pki", "kubelet.crt"),
		"--kubelet-client-certificate", kubeletClient[0], "--kubelet-client-key", kubeletClient[1],
		"--metric-resolution", "10s", "--kubelet-request-timeout", "5s", "-v=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("metrics-server log:\n%s", tail(logPath, 40))
		}
	})

	caPEM, err := os.ReadFile(ca.path)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx = context.Background()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: metricsServerName, Namespace: metav1.NamespaceSystem},
		Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(port)}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: metricsServerName, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{discoveryv1.LabelServiceName: metricsServerName, discoveryv1.LabelManagedBy: "vk-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: new(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: new("https"), Port: new(int32(port)), Protocol: new(v1.ProtocolTCP)}},
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1beta1.metrics.k8s.io"},
		"spec": map[string]any{
			"group": "metrics.k8s.io", "version": "v1beta1",
			"service":              map[string]any{"namespace": metav1.NamespaceSystem, "name": metricsServerName, "port": int64(443)},
			"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
			"groupPriorityMinimum": int64(100), "versionPriority": int64(100),
		},
	}}
	if _, err := client.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(apiServiceGVR).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, err := range []error{
			dyn.Resource(apiServiceGVR).Delete(ctx, apiService.GetName(), metav1.DeleteOptions{}),
			client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem).Delete(ctx, slice.Name, metav1.DeleteOptions{}),
			client.CoreV1().Services(metav1.NamespaceSystem).Delete(ctx, svc.Name, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("metrics-server clean-up: %v", err)
			}
		}
	})
	waitFor(t, "APIService v1beta1.metrics.k8s.io Available", 2*time.Minute, func() (bool, string) {
		u, err := dyn.Resource(apiServiceGVR).Get(ctx, apiService.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Available" {
				return m["status"] == "True", fmt.Sprintf("%v: %v", m["reason"], m["message"])
			}
		}
		return false, "no Available condition"
	})
}

// hostIP is a non-loopback IPv4 address of this machine (docker0's will
// do).
func hostIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String(), nil
			}
		}
	}
	return "", errors.New("no non-loopback IPv4 address on this machine")
}

func freePortOn(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
