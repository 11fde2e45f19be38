// Package projectcli is the client side of cri-compose's own API
// (proto/cricompose/v1): it talks to a running cri-compose over its socket
// with the generated client, and holds the `cri-compose export` and
// `cri-compose projects` subcommands, which cmd/cri-compose only dispatches.
package projectcli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// MaxExportMessage is the largest ExportProject response a client accepts:
// the server ships at most 64 MiB of mounted files, plus the compose file,
// the pause binary and the messages' framing.
const MaxExportMessage = 96 << 20

// Dial connects to cri-compose at endpoint: unix:///path, or a bare path.
// The connection is made lazily, by the first call.
func Dial(endpoint string) (*grpc.ClientConn, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	if path == "" || strings.Contains(path, "://") {
		return nil, fmt.Errorf("endpoint %q: want unix:///path/to/socket", endpoint)
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxExportMessage)))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	return conn, nil
}

// Export exports the pod named by pod: a pod sandbox id or a unique prefix
// of one, or else a pod's namespace/name, its name (when only one
// namespace has it), or its Compose project name.
func Export(ctx context.Context, c cricomposev1.ProjectsClient, pod string) (*cricomposev1.ExportProjectResponse, error) {
	resp, err := c.ExportProject(ctx, &cricomposev1.ExportProjectRequest{PodSandboxId: pod})
	if status.Code(err) != codes.NotFound || strings.TrimSpace(pod) == "" {
		return resp, err
	}
	id, lerr := findPod(ctx, c, pod)
	if lerr != nil {
		if errors.Is(lerr, errNoPod) {
			return nil, err // the server's NotFound says it best
		}
		return nil, lerr
	}
	return c.ExportProject(ctx, &cricomposev1.ExportProjectRequest{PodSandboxId: id})
}

var errNoPod = errors.New("no such pod")

// findPod looks a pod up by name among the projects.
func findPod(ctx context.Context, c cricomposev1.ProjectsClient, name string) (string, error) {
	list, err := c.ListProjects(ctx, &cricomposev1.ListProjectsRequest{})
	if err != nil {
		return "", err
	}
	var found []*cricomposev1.Project
	for _, p := range list.GetProjects() {
		md := p.GetMetadata()
		if name == md.GetNamespace()+"/"+md.GetName() || name == md.GetName() || name == p.GetName() {
			found = append(found, p)
		}
	}
	if len(found) > 1 {
		// Several attempts of one pod: the one that runs.
		var ready []*cricomposev1.Project
		for _, p := range found {
			if p.GetState() == cricomposev1.ProjectState_PROJECT_STATE_READY {
				ready = append(ready, p)
			}
		}
		if len(ready) == 1 {
			found = ready
		}
	}
	switch len(found) {
	case 0:
		return "", errNoPod
	case 1:
		return found[0].GetPodSandboxId(), nil
	}
	var names []string
	for _, p := range found {
		names = append(names, fmt.Sprintf("%s/%s (%.13s)", p.GetMetadata().GetNamespace(), p.GetMetadata().GetName(), p.GetPodSandboxId()))
	}
	return "", fmt.Errorf("%q names %d pods: %s; give a pod id", name, len(found), strings.Join(names, ", "))
}
