package vk

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

// probeUserAgent is what kubelet sends (kube-probe/<major>.<minor>).
const probeUserAgent = "kube-probe/1.37"

// maxProbeOutput is how much of a probe's output is kept for its event, as
// kubelet's limit.
const maxProbeOutput = 10 * 1024

// handlerRunner runs probe and hook actions against the runtime and the
// pod's network.
type handlerRunner struct {
	rt   *Runtime
	http *http.Client
}

func newHandlerRunner(rt *Runtime) *handlerRunner {
	tr := &http.Transport{
		// As kubelet: no keep-alive (each probe is its own connection),
		// no proxy, and HTTPS without verifying the container's
		// certificate.
		DisableKeepAlives: true,
		Proxy:             nil,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // kubelet's probes do not verify either
	}
	return &handlerRunner{rt: rt, http: &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			// Redirects are followed on the same host only; one to
			// another host ends the probe with the 3xx, a success with a
			// warning (kubelet's followNonLocalRedirects=false).
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			if req.URL.Hostname() != via[0].URL.Hostname() {
				return http.ErrUseLastResponse
			}
			return nil
		},
	}}
}

// probe is the probeFunc over the real runtime and network.
func (h *handlerRunner) probe(ctx context.Context, kind probeKind, p *v1.Probe, t *probeTarget) (probeResult, string, error) {
	timeout := seconds(p.TimeoutSeconds, 1)
	switch {
	case p.Exec != nil:
		return h.exec(ctx, t.id, p.Exec.Command, timeout)
	case p.HTTPGet != nil:
		if _, err := resolvePort(p.HTTPGet.Port, t.c); err != nil {
			return resultUnknown, "", err // a spec error, not the container's
		}
		code, out, err := h.httpGet(ctx, p.HTTPGet, t)
		if err != nil {
			return resultFailure, err.Error(), nil
		}
		switch {
		case code >= 200 && code < 300:
			return resultSuccess, out, nil
		case code >= 300 && code < 400:
			// A redirect left unfollowed (to another host, or past the
			// tenth): a success with a warning, in kubelet's words.
			return resultWarning, "Probe terminated redirects, Response body: " + out, nil
		}
		return resultFailure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code), nil
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, t.c)
		if err != nil {
			return resultUnknown, "", err
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = t.host
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return resultFailure, err.Error(), nil
		}
		conn.Close()
		return resultSuccess, "", nil
	case p.GRPC != nil:
		return h.grpc(ctx, p.GRPC, t, timeout)
	}
	return resultUnknown, "", fmt.Errorf("%s probe has no action", kind)
}

// exec runs cmd in the container with CRI ExecSync; a non-zero exit or a
// timeout is a failure.
func (h *handlerRunner) exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (probeResult, string, error) {
	stdout, stderr, err := h.rt.ExecSync(ctx, id, cmd, timeout)
	out := string(append(stdout, stderr...))
	if len(out) > maxProbeOutput {
		out = out[:maxProbeOutput]
	}
	var exit utilexec.ExitError
	switch {
	case err == nil:
		return resultSuccess, out, nil
	case errors.As(err, &exit):
		if exit.ExitStatus() == 0 {
			return resultSuccess, out, nil
		}
		return resultFailure, out, nil
	case errors.Is(err, remote.ErrCommandTimedOut), status.Code(err) == codes.DeadlineExceeded, errors.Is(err, context.DeadlineExceeded):
		return resultFailure, fmt.Sprintf("command %q timed out", strings.Join(cmd, " ")), nil
	}
	return resultUnknown, "", err
}

// httpGet sends the GET of an httpGet probe or hook; it returns the status
// code and the start of the body.
func (h *handlerRunner) httpGet(ctx context.Context, a *v1.HTTPGetAction, t *probeTarget) (int, string, error) {
	port, err := resolvePort(a.Port, t.c)
	if err != nil {
		return 0, "", err
	}
	host := a.Host
	if host == "" {
		host = t.host
	}
	if host == "" {
		return 0, "", errors.New("the pod has no IP address yet")
	}
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u, err := url.Parse(a.Path)
	if err != nil {
		u = &url.URL{Path: a.Path}
	}
	u.Scheme, u.Host = scheme, net.JoinHostPort(host, strconv.Itoa(port))
	if u.Path == "" {
		u.Path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("User-Agent", probeUserAgent)
	req.Header.Set("Accept", "*/*")
	for _, hd := range a.HTTPHeaders {
		if strings.EqualFold(hd.Name, "Host") {
			req.Host = hd.Value
			continue
		}
		req.Header.Add(hd.Name, hd.Value)
	}
	resp, err := h.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxProbeOutput))
	return resp.StatusCode, string(b), nil
}

// grpc calls grpc.health.v1.Health/Check; SERVING is a success.
func (h *handlerRunner) grpc(ctx context.Context, a *v1.GRPCAction, t *probeTarget, timeout time.Duration) (probeResult, string, error) {
	addr := net.JoinHostPort(t.host, strconv.Itoa(int(a.Port)))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent(probeUserAgent))
	if err != nil {
		return resultFailure, err.Error(), nil
	}
	defer conn.Close()
	svc := ""
	if a.Service != nil {
		svc = *a.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
	switch {
	case status.Code(err) == codes.Unimplemented:
		return resultFailure, fmt.Sprintf("this server does not implement the grpc health protocol (grpc.health.v1.Health): %v", err), nil
	case status.Code(err) == codes.DeadlineExceeded:
		return resultFailure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
	case err != nil:
		return resultFailure, fmt.Sprintf("error: health rpc probe failed: %v", err), nil
	case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		return resultFailure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus()), nil
	}
	return resultSuccess, "", nil
}

// resolvePort is a probe's or hook's port: a number, or the name of one of
// the container's ports.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	port := -1
	if p.Type == intstr.Int {
		port = p.IntValue()
	} else {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port = int(cp.ContainerPort)
			}
		}
		if port < 0 {
			if n, err := strconv.Atoi(p.StrVal); err == nil {
				port = n
			} else {
				return 0, fmt.Errorf("no port named %q in container %s", p.StrVal, c.Name)
			}
		}
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port %d", port)
	}
	return port, nil
}
