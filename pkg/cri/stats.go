package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/stats"
	"github.com/cri-compose/cri-compose/pkg/cri/store"
)

// The stats and metrics RPCs answer from the samples that package stats
// keeps; this file wires it to the store.

// statsSource tells the sampler what runs, from the store.
type statsSource struct{ st *store.Store }

func (s statsSource) Targets() []stats.Target {
	var out []stats.Target
	s.st.EachSandbox(func(sb sandboxRec) {
		if sb.State != runtime.PodSandboxState_SANDBOX_READY || sb.Pid <= 0 {
			return
		}
		lx := sb.Config.GetLinux()
		out = append(out, stats.Target{ID: sb.ID, Pid: sb.Pid, Infra: true, PodCgroup: lx.GetCgroupParent() != "",
			HostNetwork: lx.GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtime.NamespaceMode_NODE})
	})
	s.st.EachContainer(func(ct containerRec) {
		if ct.State == runtime.ContainerState_CONTAINER_RUNNING && ct.Pid > 0 {
			out = append(out, stats.Target{ID: ct.ID, Pid: ct.Pid})
		}
	})
	return out
}

func (s statsSource) ContainerIDs() []string {
	var out []string
	s.st.EachContainer(func(c containerRec) { out = append(out, c.ID) })
	return out
}

func statsContainer(c containerRec) stats.Container {
	return stats.Container{ID: c.ID, Pid: c.Pid, State: c.State, Config: c.Config, StartedAt: c.StartedAt, Image: c.Image}
}

func statsContainers(recs []containerRec) []stats.Container {
	out := make([]stats.Container, len(recs))
	for i, c := range recs {
		out[i] = statsContainer(c)
	}
	return out
}

func statsPod(sb sandboxRec) stats.Pod {
	return stats.Pod{ID: sb.ID, State: sb.State, Config: sb.Config}
}

// containersByPod is every container of the store, by sandbox id.
func (s *Server) containersByPod() map[string][]stats.Container {
	byPod := map[string][]stats.Container{}
	for _, c := range s.store.Containers(nil) {
		byPod[c.SandboxID] = append(byPod[c.SandboxID], statsContainer(c))
	}
	return byPod
}

// runStatsAndEvents samples stats until ctx ends, then ends the container
// event streams (the runtime is stopping).
func (s *Server) runStatsAndEvents(ctx context.Context) {
	s.stats.Run(ctx)
	s.cevents.close()
}
