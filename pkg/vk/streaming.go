package vk

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/proxy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Exec, attach and port-forward go as in kubelet: the kubelet API asks the
// runtime for a streaming URL (CRI Exec, Attach, PortForward) and proxies
// the client's upgraded connection (SPDY or WebSocket) to it, so every
// protocol version the runtime's streaming server speaks works unchanged.

// ServeExec serves /exec/{namespace}/{pod}/{container}?command=…
func (p *Provider) ServeExec(w http.ResponseWriter, r *http.Request) {
	ns, pod, container, ok := pathParts(r.URL.Path, "/exec/", 3)
	if !ok {
		http.NotFound(w, r)
		return
	}
	o := streamOpts(r)
	cmd := r.URL.Query()[v1.ExecCommandParam]
	if len(cmd) == 0 {
		http.Error(w, "no command", http.StatusBadRequest)
		return
	}
	id, err := p.runningContainer(r.Context(), ns, pod, container)
	if err != nil {
		httpError(w, err)
		return
	}
	resp, err := p.rt.Exec(r.Context(), &runtimeapi.ExecRequest{ContainerId: id, Cmd: cmd,
		Tty: o.tty, Stdin: o.stdin, Stdout: o.stdout, Stderr: o.stderr && !o.tty})
	if err != nil {
		httpError(w, fmt.Errorf("CRI Exec: %w", err))
		return
	}
	proxyStream(w, r, resp.Url)
}

// ServeAttach serves /attach/{namespace}/{pod}/{container}.
func (p *Provider) ServeAttach(w http.ResponseWriter, r *http.Request) {
	ns, pod, container, ok := pathParts(r.URL.Path, "/attach/", 3)
	if !ok {
		http.NotFound(w, r)
		return
	}
	o := streamOpts(r)
	id, err := p.runningContainer(r.Context(), ns, pod, container)
	if err != nil {
		httpError(w, err)
		return
	}
	resp, err := p.rt.Attach(r.Context(), &runtimeapi.AttachRequest{ContainerId: id,
		Tty: o.tty, Stdin: o.stdin, Stdout: o.stdout, Stderr: o.stderr && !o.tty})
	if err != nil {
		httpError(w, fmt.Errorf("CRI Attach: %w", err))
		return
	}
	proxyStream(w, r, resp.Url)
}

// ServePortForward serves /portForward/{namespace}/{pod}.
func (p *Provider) ServePortForward(w http.ResponseWriter, r *http.Request) {
	ns, pod, _, ok := pathParts(r.URL.Path, "/portForward/", 2)
	if !ok {
		http.NotFound(w, r)
		return
	}
	var ports []int32
	for _, s := range r.URL.Query()["port"] { // WebSocket clients name them here
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil {
			http.Error(w, fmt.Sprintf("bad port %q", s), http.StatusBadRequest)
			return
		}
		ports = append(ports, int32(n))
	}
	pw := p.worker(ns, pod)
	if pw == nil {
		http.Error(w, fmt.Sprintf("pod %s/%s is not on this node", ns, pod), http.StatusNotFound)
		return
	}
	sbs, err := p.rt.ListPodSandbox(r.Context(), &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: map[string]string{labelPodUID: string(pw.pod().UID)},
	})
	if err != nil || len(sbs) == 0 {
		httpError(w, fmt.Errorf("pod %s/%s has no running sandbox (%v)", ns, pod, err))
		return
	}
	resp, err := p.rt.PortForward(r.Context(), &runtimeapi.PortForwardRequest{PodSandboxId: sbs[0].Id, Port: ports})
	if err != nil {
		httpError(w, fmt.Errorf("CRI PortForward: %w", err))
		return
	}
	proxyStream(w, r, resp.Url)
}

type streamOptions struct{ stdin, stdout, stderr, tty bool }

func streamOpts(r *http.Request) streamOptions {
	q := r.URL.Query()
	is := func(k string) bool { v := q.Get(k); return v == "1" || v == "true" }
	return streamOptions{stdin: is(v1.ExecStdinParam), stdout: is(v1.ExecStdoutParam),
		stderr: is(v1.ExecStderrParam), tty: is(v1.ExecTTYParam)}
}

// pathParts splits /prefix/a/b[/c].
func pathParts(path, prefix string, n int) (ns, pod, container string, ok bool) {
	rest, found := strings.CutPrefix(path, prefix)
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	if len(parts) != n {
		return "", "", "", false
	}
	for _, s := range parts {
		if s == "" {
			return "", "", "", false
		}
	}
	if n == 3 {
		container = parts[2]
	}
	return parts[0], parts[1], container, true
}

// runningContainer is the id of the pod's running container named name.
func (p *Provider) runningContainer(ctx context.Context, ns, pod, name string) (string, error) {
	w := p.worker(ns, pod)
	if w == nil {
		return "", errNotOnNode{fmt.Sprintf("pod %s/%s is not on this node", ns, pod)}
	}
	cs, err := p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			labelPodUID: string(w.pod().UID), labelContainerName: name,
		},
	})
	if err != nil {
		return "", fmt.Errorf("list containers: %w", err)
	}
	if len(cs) == 0 {
		return "", errNotOnNode{fmt.Sprintf("container %q of pod %s/%s is not running", name, ns, pod)}
	}
	return cs[0].Id, nil
}

type errNotOnNode struct{ msg string }

func (e errNotOnNode) Error() string { return e.msg }

func httpError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if _, ok := err.(errNotOnNode); ok {
		code = http.StatusNotFound
	}
	http.Error(w, err.Error(), code)
}

// proxyStream hands the client's connection to the runtime's streaming
// server at raw, as kubelet's proxyStream does.
func proxyStream(w http.ResponseWriter, r *http.Request, raw string) {
	u, err := url.Parse(raw)
	if err != nil {
		httpError(w, fmt.Errorf("runtime streaming URL %q: %w", raw, err))
		return
	}
	h := proxy.NewUpgradeAwareHandler(u, nil, false, true, responder{})
	h.ServeHTTP(w, r)
}

type responder struct{}

func (responder) Error(w http.ResponseWriter, r *http.Request, err error) {
	klog.ErrorS(err, "Proxying a stream to the runtime", "uri", r.RequestURI)
	http.Error(w, err.Error(), http.StatusInternalServerError)
}
