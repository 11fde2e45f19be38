package cri

import (
	"context"
	"encoding/json"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PodSandboxStatus answers from the store.
func (s *Server) PodSandboxStatus(ctx context.Context, r *runtime.PodSandboxStatusRequest) (*runtime.PodSandboxStatusResponse, error) {
	sb, err := s.store.Sandbox(r.GetPodSandboxId())
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &runtime.PodSandboxStatusResponse{Status: sandboxStatus(sb)}
	if r.GetVerbose() {
		info, _ := json.Marshal(map[string]any{
			"pid":          sb.Pid,
			"project":      sb.Project,
			"composeFile":  s.hostInfo().ComposeFile(sb.Project),
			"image":        sb.Service.Image,
			"config":       sb.Config,
			"runtimeSpec":  sb.Service,
			"networkName":  sb.Network,
			"engineHostIP": sb.IP,
		})
		resp.Info = map[string]string{"info": string(info)}
	}
	for _, c := range s.store.ContainersOf(sb.ID) {
		resp.ContainersStatuses = append(resp.ContainersStatuses, containerStatus(c))
	}
	resp.Timestamp = sb.CreatedAt
	return resp, nil
}

func sandboxStatus(sb sandboxRec) *runtime.PodSandboxStatus {
	cfg := sb.Config
	ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	st := &runtime.PodSandboxStatus{
		Id:          sb.ID,
		Metadata:    cfg.GetMetadata(),
		State:       sb.State,
		CreatedAt:   sb.CreatedAt,
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Linux: &runtime.LinuxPodSandboxStatus{Namespaces: &runtime.Namespace{Options: &runtime.NamespaceOption{
			Network: ns.GetNetwork(), Pid: ns.GetPid(), Ipc: ns.GetIpc(),
		}}},
	}
	if ns.GetNetwork() != runtime.NamespaceMode_NODE {
		// As kubelet's CNI results: the IPv4 address first, the other
		// family's as an additional one.
		st.Network = &runtime.PodSandboxNetworkStatus{Ip: sb.IP}
		if sb.IP == "" {
			st.Network.Ip = sb.IPv6
		} else if sb.IPv6 != "" {
			st.Network.AdditionalIps = []*runtime.PodIP{{Ip: sb.IPv6}}
		}
	} else {
		st.Network = &runtime.PodSandboxNetworkStatus{}
	}
	return st
}
