package cri

import (
	"context"
	"sort"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// ListProjects answers from the store: every pod sandbox as its Compose
// project, newest first, with the infra service and every container (all
// attempts, newest first within a service).
func (p *projectsService) ListProjects(ctx context.Context, _ *cricomposev1.ListProjectsRequest) (*cricomposev1.ListProjectsResponse, error) {
	s := p.s
	if err := s.store.WaitSynced(ctx); err != nil {
		return nil, grpcError(err)
	}
	byPod := map[string][]containerRec{}
	for _, c := range s.store.Containers(nil) { // newest first
		byPod[c.SandboxID] = append(byPod[c.SandboxID], c)
	}
	resp := &cricomposev1.ListProjectsResponse{}
	for _, sb := range s.store.Sandboxes(nil) { // newest first
		md := sb.Config.GetMetadata()
		proj := &cricomposev1.Project{
			Name:         sb.Project,
			PodSandboxId: sb.ID,
			Metadata: &cricomposev1.PodMetadata{
				Name: md.GetName(), Namespace: md.GetNamespace(), Uid: md.GetUid(), Attempt: md.GetAttempt(),
			},
			State:       projectState(sb.State),
			ComposeFile: s.composeFile(sb.Project),
			CreatedAt:   sb.CreatedAt,
			Services: []*cricomposev1.Service{{
				Name: sandbox.InfraService, ContainerId: sb.ID, State: infraServiceState(sb.State),
				Image: sb.Service.Image, ContainerName: infraContainerName, Attempt: md.GetAttempt(),
				CreatedAt: sb.CreatedAt,
			}},
		}
		ctrs := byPod[sb.ID]
		sort.SliceStable(ctrs, func(i, j int) bool { return ctrs[i].Service < ctrs[j].Service })
		for _, c := range ctrs {
			svc := &cricomposev1.Service{
				Name: c.Service, ContainerId: c.ID, State: serviceState(c.State), Image: c.Image,
				ContainerName: c.Config.GetMetadata().GetName(), Attempt: c.Config.GetMetadata().GetAttempt(),
				CreatedAt: c.CreatedAt,
			}
			if svc.State == cricomposev1.ServiceState_SERVICE_STATE_EXITED {
				svc.ExitCode = c.ExitCode
			}
			proj.Services = append(proj.Services, svc)
		}
		resp.Projects = append(resp.Projects, proj)
	}
	return resp, nil
}
