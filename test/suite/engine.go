package suite

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// Engine is a test's view of one engine: what pods of a namespace left
// there.
type Engine struct {
	*dockerapi.Client
	api *client.Client
}

// NewEngine connects to host ("" = DOCKER_HOST or the default socket).
func NewEngine(t testing.TB, host string) *Engine {
	t.Helper()
	d, err := dockerapi.New(host)
	if err != nil {
		t.Fatal(err)
	}
	opts := []client.Opt{client.FromEnv} // the client negotiates the API version by itself
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	api, err := client.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); api.Close() })
	return &Engine{Client: d, api: api}
}

// Containers are the ids of the engine's containers (in any state) of pods
// in namespace, with their engine names.
func (e *Engine) Containers(ctx context.Context, namespace string) (map[string]string, error) {
	list, err := e.ContainerList(ctx, sandbox.LabelPodNamespace+"="+namespace)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range list {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out[c.ID] = name
	}
	return out, nil
}

// Networks counts the engine's networks named exactly name.
func (e *Engine) Networks(ctx context.Context, name string) (int, error) {
	r, err := e.api.NetworkList(ctx, client.NetworkListOptions{Filters: client.Filters{}.Add("name", name)})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, nw := range r.Items {
		if nw.Name == name {
			n++
		}
	}
	return n, nil
}

// NetworkEndpoints counts the containers attached to network name.
func (e *Engine) NetworkEndpoints(ctx context.Context, name string) (int, error) {
	r, err := e.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if err != nil {
		return 0, err
	}
	return len(r.Network.Containers), nil
}

// Sweep removes every container of namespace and the network (test
// cleanup, whatever the test did); it says what it had to remove.
func (e *Engine) Sweep(namespace, network string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var removed []string
	ids, _ := e.Containers(ctx, namespace)
	for id, name := range ids {
		if err := e.ContainerRemove(ctx, id); err == nil {
			removed = append(removed, name)
		}
	}
	if network != "" {
		removeNetwork(nil, e.Client, network)
	}
	sort.Strings(removed)
	return removed
}

// removeNetwork removes a network, waiting (up to 20s) for the engine to
// let go of endpoints of containers just removed.
func removeNetwork(t testing.TB, c *dockerapi.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for i := 0; i < 20; i++ {
		if err = c.NetworkRemove(ctx, name); err == nil || dockerapi.IsNotFound(err) {
			return
		}
		time.Sleep(time.Second)
	}
	if t != nil {
		t.Logf("network %s left in the engine: %v", name, err)
	}
}

// WaitCRILog waits until the CRI log file of a container at path (under
// the pod's log directory, not the daemon's own log) holds want, and
// fails t with what it holds after timeout.
func WaitCRILog(t testing.TB, path, want string, timeout time.Duration) {
	t.Helper()
	Eventually(t, fmt.Sprintf("the log %s to hold %q", path, want), timeout, func() (bool, string) {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), want), "it holds:\n" + string(b)
	})
}
