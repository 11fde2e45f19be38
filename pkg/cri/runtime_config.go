package cri

import (
	"context"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// RuntimeConfig reports the engine's cgroup driver, so kubelet can match it.
func (s *Server) RuntimeConfig(ctx context.Context, r *runtime.RuntimeConfigRequest) (*runtime.RuntimeConfigResponse, error) {
	info, err := s.docker.Info(ctx)
	if err != nil {
		return nil, grpcError(err)
	}
	driver := runtime.CgroupDriver_CGROUPFS
	if info.CgroupDriver == "systemd" {
		driver = runtime.CgroupDriver_SYSTEMD
	}
	return &runtime.RuntimeConfigResponse{Linux: &runtime.LinuxRuntimeConfiguration{CgroupDriver: driver}}, nil
}

// UpdateRuntimeConfig accepts the pod CIDR kubelet sends. Pod addresses come
// from the engine's pod network, whose subnet is set by configuration.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, r *runtime.UpdateRuntimeConfigRequest) (*runtime.UpdateRuntimeConfigResponse, error) {
	if cidr := r.GetRuntimeConfig().GetNetworkConfig().GetPodCidr(); cidr != "" {
		klog.InfoS("Pod CIDR from the node noted; pod addresses come from the engine network", "podCIDR", cidr, "network", s.cfg.Network)
	}
	return &runtime.UpdateRuntimeConfigResponse{}, nil
}
