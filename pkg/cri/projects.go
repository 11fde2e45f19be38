package cri

import (
	"sort"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// projectsService serves cri-compose's own API (proto/cricompose/v1) beside
// CRI, on the same gRPC server: pods as Compose projects
// (project_list.go), exported to run on their own (project_export.go), and
// container logs for clients without access to the log files
// (log_follow.go). It answers from the runtime's store.
type projectsService struct {
	cricomposev1.UnimplementedProjectsServer
	s *Server
}

// Projects is the server of cri-compose's own API; Register serves it.
func (s *Server) Projects() cricomposev1.ProjectsServer { return &projectsService{s: s} }

// newestAttempts keeps, per service, the newest attempt of its container
// (the one an export runs), sorted by service.
func newestAttempts(ctrs []containerRec) []containerRec {
	newest := map[string]containerRec{}
	for _, c := range ctrs {
		if cur, ok := newest[c.Service]; !ok || c.CreatedAt > cur.CreatedAt {
			newest[c.Service] = c
		}
	}
	out := make([]containerRec, 0, len(newest))
	for _, c := range newest {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out
}

func projectState(st runtime.PodSandboxState) cricomposev1.ProjectState {
	switch st {
	case runtime.PodSandboxState_SANDBOX_READY:
		return cricomposev1.ProjectState_PROJECT_STATE_READY
	case runtime.PodSandboxState_SANDBOX_NOTREADY:
		return cricomposev1.ProjectState_PROJECT_STATE_NOTREADY
	}
	return cricomposev1.ProjectState_PROJECT_STATE_UNSPECIFIED
}

func serviceState(st runtime.ContainerState) cricomposev1.ServiceState {
	switch st {
	case runtime.ContainerState_CONTAINER_CREATED:
		return cricomposev1.ServiceState_SERVICE_STATE_CREATED
	case runtime.ContainerState_CONTAINER_RUNNING:
		return cricomposev1.ServiceState_SERVICE_STATE_RUNNING
	case runtime.ContainerState_CONTAINER_EXITED:
		return cricomposev1.ServiceState_SERVICE_STATE_EXITED
	}
	return cricomposev1.ServiceState_SERVICE_STATE_UNKNOWN
}

// infraServiceState is the infra container's state as a service's.
func infraServiceState(st runtime.PodSandboxState) cricomposev1.ServiceState {
	if st == runtime.PodSandboxState_SANDBOX_READY {
		return cricomposev1.ServiceState_SERVICE_STATE_RUNNING
	}
	return cricomposev1.ServiceState_SERVICE_STATE_EXITED
}

// composeFile is the path of the compose file the server keeps for a pod.
func (s *Server) composeFile(project string) string {
	return s.hostInfo().ComposeFile(project)
}

// infraContainerName is what ListProjects calls the infra container, as
// kubelet's dockershim and crictl do.
const infraContainerName = "POD"
