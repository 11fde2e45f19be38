package cri

import (
	"context"
	"encoding/json"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status reports the runtime ready when the engine answers and the store
// has been filled from it, and the network ready when the pod network
// exists on it.
func (s *Server) Status(ctx context.Context, r *runtime.StatusRequest) (*runtime.StatusResponse, error) {
	rt := &runtime.RuntimeCondition{Type: runtime.RuntimeReady, Status: true}
	nw := &runtime.RuntimeCondition{Type: runtime.NetworkReady, Status: true}
	if err := s.ready(ctx); err != nil {
		rt.Status, rt.Reason, rt.Message = false, "EngineUnavailable", err.Error()
		nw.Status, nw.Reason, nw.Message = false, "EngineUnavailable", "the pod network lives on the engine"
	} else if !s.store.synced.Load() {
		// Until the store holds every pod on the engine, List would tell
		// kubelet that running pods are gone (and it would make new ones).
		rt.Status, rt.Reason, rt.Message = false, "Resyncing", "reading pods and containers from the engine"
	}
	resp := &runtime.StatusResponse{Status: &runtime.RuntimeStatus{Conditions: []*runtime.RuntimeCondition{rt, nw}}}
	if r.GetVerbose() {
		h := s.hostInfo()
		fields := map[string]any{
			"engine":              s.docker.Host(),
			"apiVersion":          s.docker.APIVersion(),
			"network":             s.cfg.Network,
			"podInfraImage":       h.InfraImage,
			"stateDir":            s.cfg.StateDir,
			"fullPrivileged":      h.FullPrivileged,
			"negativeOOMScoreAdj": h.NegativeOOMScoreAdj,
			"appArmor":            h.AppArmor,
		}
		// The engine host's size, for a node agent (vk-cri) to report as
		// capacity: CRI has no call for it. Named as `docker info` names them.
		if ei, err := s.docker.Info(ctx); err == nil {
			fields["ncpu"] = ei.NCPU
			fields["memTotal"] = ei.MemTotal
			fields["kernelVersion"] = ei.KernelVersion
			fields["operatingSystem"] = ei.OperatingSystem
			fields["architecture"] = ei.Architecture
			fields["engineVersion"] = ei.ServerVersion
		}
		info, _ := json.Marshal(fields)
		resp.Info = map[string]string{"config": string(info)}
	}
	return resp, nil
}
