package cri

import (
	"context"
	"encoding/json"

	"github.com/compose-spec/compose-go/v2/types"
	"google.golang.org/protobuf/proto"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
)

// ContainerStatus answers from the store.
func (s *Server) ContainerStatus(ctx context.Context, r *runtime.ContainerStatusRequest) (*runtime.ContainerStatusResponse, error) {
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return nil, grpcError(err)
	}
	resp := &runtime.ContainerStatusResponse{Status: containerStatus(c)}
	if r.GetVerbose() {
		info, _ := json.Marshal(map[string]any{
			"sandboxID":   c.SandboxID,
			"pid":         c.Pid,
			"project":     c.Project,
			"service":     c.Service,
			"config":      c.Config,
			"runtimeSpec": c.ServiceCfg,
		})
		resp.Info = map[string]string{"info": string(info)}
	}
	return resp, nil
}

func containerStatus(c containerRec) *runtime.ContainerStatus {
	cfg := c.Config
	st := &runtime.ContainerStatus{
		Id:          c.ID,
		Metadata:    cfg.GetMetadata(),
		State:       c.State,
		CreatedAt:   c.CreatedAt,
		StartedAt:   c.StartedAt,
		FinishedAt:  c.FinishedAt,
		ExitCode:    c.ExitCode,
		Image:       &runtime.ImageSpec{Image: c.Image, Annotations: cfg.GetImage().GetAnnotations(), UserSpecifiedImage: cfg.GetImage().GetImage()},
		ImageRef:    c.ImageID,
		ImageId:     c.ImageID,
		Reason:      c.Reason,
		Message:     c.Message,
		Labels:      cfg.GetLabels(),
		Annotations: cfg.GetAnnotations(),
		Mounts:      cfg.GetMounts(),
		LogPath:     c.LogPath,
	}
	if c.State != runtime.ContainerState_CONTAINER_EXITED {
		st.ExitCode, st.Reason, st.FinishedAt = 0, "", 0
	}
	if r := linuxResources(cfg.GetLinux().GetResources(), c.ServiceCfg); r != nil {
		st.Resources = &runtime.ContainerResources{Linux: r}
	}
	if id, ok := sandbox.ParseIdentity(c.User); ok {
		st.User = &runtime.ContainerUser{Linux: &runtime.LinuxContainerUser{
			Uid: id.UID, Gid: id.GID, SupplementalGroups: id.Groups}}
	}
	return st
}

// linuxResources is what the container runs with: the engine's values
// (svc, rendered from its config, which UpdateContainerResources changes)
// over the ones it was created with, as kubelet reads them back to know a
// resize took. Nil when neither says anything.
func linuxResources(created *runtime.LinuxContainerResources, svc *types.ServiceConfig) *runtime.LinuxContainerResources {
	if svc == nil {
		return created
	}
	r := &runtime.LinuxContainerResources{}
	if created != nil {
		r = proto.Clone(created).(*runtime.LinuxContainerResources)
	}
	r.CpuPeriod, r.CpuQuota, r.CpuShares = svc.CPUPeriod, svc.CPUQuota, svc.CPUShares
	r.CpusetCpus = svc.CPUSet
	r.MemoryLimitInBytes = int64(svc.MemLimit)
	if svc.MemSwapLimit > 0 {
		r.MemorySwapLimitInBytes = int64(svc.MemSwapLimit)
	}
	if created == nil && proto.Equal(r, &runtime.LinuxContainerResources{}) {
		return nil
	}
	return r
}
