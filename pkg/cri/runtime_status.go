package cri

import (
	"context"
	"encoding/json"
	"fmt"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Status reports the runtime ready when the engine answers and the store
// has been filled from it, and the network ready when the pod network
// exists on it.
func (s *Server) Status(ctx context.Context, r *runtime.StatusRequest) (*runtime.StatusResponse, error) {
	rt := &runtime.RuntimeCondition{Type: runtime.RuntimeReady, Status: true}
	nw := &runtime.RuntimeCondition{Type: runtime.NetworkReady, Status: true}
	err := s.ready(ctx)
	connected := s.events.Connected()
	if err == nil && !connected {
		// The event stream is down, so the engine may be gone while the
		// preparation still stands: ask it.
		if _, perr := s.docker.Ping(ctx); perr != nil {
			err = fmt.Errorf("engine not ready: %w", perr)
		}
	}
	switch {
	case err != nil:
		rt.Status, rt.Reason, rt.Message = false, "EngineUnavailable", err.Error()
		nw.Status, nw.Reason, nw.Message = false, "EngineUnavailable", "the pod network lives on the engine"
	case !s.store.Synced():
		// Until the store holds every pod on the engine, List would tell
		// kubelet that running pods are gone (and it would make new ones).
		rt.Status, rt.Reason, rt.Message = false, "Resyncing", "reading pods and containers from the engine"
	case !connected || s.resyncedConn.Load() != s.events.Connection():
		// The engine answers again but the store has not re-read it since
		// the stream came back: it may still show as running containers
		// the engine stopped meanwhile (an engine restart), and kubelet
		// would report such pods Ready.
		rt.Status, rt.Reason, rt.Message = false, "Resyncing", "following the engine's events again: reading pods and containers from the engine"
	}
	resp := &runtime.StatusResponse{Status: &runtime.RuntimeStatus{Conditions: []*runtime.RuntimeCondition{rt, nw}},
		RuntimeHandlers: []*runtime.RuntimeHandler{{Name: "", Features: s.handlerFeatures()}},
		// CreateContainer resolves users and groups itself (ResolveUser).
		Features: &runtime.RuntimeFeatures{SupplementalGroupsPolicy: true}}
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
			// Host paths are copied to the engine (a remote host): the
			// features that differ are in docs/remote.md.
			"stageMounts": h.StageMounts,
			// Whether a sandbox may ask for pod-level resources without a
			// cgroup parent of its own (a node agent admits such pods by it).
			"podLevelResources":       h.PodCgroupRoot != "",
			"podLevelResourcesWhyNot": h.PodCgroupsWhyNot,
			// The pod network's bridge options, and how the network
			// differs from them while pods keep it ("": it does not).
			"ipMasq":         !s.cfg.NetworkOptions.NoIPMasquerade,
			"networkMTU":     s.cfg.NetworkOptions.MTU,
			"networkPending": s.podNetworkPending(),
			// The subnets the pod network is (or will be) made on: the
			// node's pod CIDR once UpdateRuntimeConfig gave it.
			"podSubnets": prefixStrings(s.podSubnets()),
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

// handlerFeatures are the features of the one runtime handler (the
// engine's default runtime). User namespaces per pod need an engine that
// can give one container its own (none can: the engine has one
// daemon-wide remapping); recursive read-only mounts need the engine to
// make them (API 1.44+).
func (s *Server) handlerFeatures() *runtime.RuntimeHandlerFeatures {
	return &runtime.RuntimeHandlerFeatures{RecursiveReadOnlyMounts: s.hostInfo().RecursiveReadOnly}
}
