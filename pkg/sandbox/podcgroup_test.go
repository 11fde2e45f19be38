package sandbox

import (
	"errors"
	"testing"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodCgroup(t *testing.T) {
	can := Host{PodCgroupRoot: "/cri-compose"}
	cannot := Host{PodCgroupsWhyNot: "the engine is on another host"}
	withLinux := func(l *runtime.LinuxPodSandboxConfig) *runtime.PodSandboxConfig {
		cfg := testSandbox()
		cfg.Linux = l
		return cfg
	}
	limited := &runtime.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}
	tests := []struct {
		name    string
		cfg     *runtime.PodSandboxConfig
		h       Host
		want    string
		refused bool
	}{
		{"no resources", testSandbox(), can, "", false},
		{"no resources, engine cannot", testSandbox(), cannot, "", false},
		{"resources", withLinux(&runtime.LinuxPodSandboxConfig{Resources: limited}), can, "/cri-compose/" + ProjectName(testSandbox().GetMetadata()), false},
		{"only shares", withLinux(&runtime.LinuxPodSandboxConfig{Resources: &runtime.LinuxContainerResources{CpuShares: 512}}), can, "/cri-compose/" + ProjectName(testSandbox().GetMetadata()), false},
		{"nothing asked", withLinux(&runtime.LinuxPodSandboxConfig{Resources: &runtime.LinuxContainerResources{}}), cannot, "", false},
		// A kubelet makes the pod cgroup itself and names it.
		{"cgroup parent given", withLinux(&runtime.LinuxPodSandboxConfig{Resources: limited, CgroupParent: "/kubepods/podx"}), cannot, "", false},
		{"engine cannot", withLinux(&runtime.LinuxPodSandboxConfig{Resources: limited}), cannot, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodCgroup(tc.cfg, tc.h)
			if tc.refused {
				if !errors.Is(err, ErrUnsupported) || err.Error() != "not supported: pod-level resources: the engine is on another host" {
					t.Fatalf("PodCgroup = %q, %v; want ErrUnsupported with the reason", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PodCgroup = %q, %v; want %q", got, err, tc.want)
			}
			if got != "" && !IsPodCgroup(got, tc.h) {
				t.Errorf("IsPodCgroup(%q) = false", got)
			}
		})
	}
	if IsPodCgroup("/kubepods/podx", can) || IsPodCgroup("/cri-compose-other/x", can) || IsPodCgroup("/cri-compose/x", cannot) {
		t.Error("IsPodCgroup claims a cgroup cri-compose did not make")
	}
}
