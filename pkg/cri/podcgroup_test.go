package cri_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/suite"
)

// TestPodCgroup: a sandbox that asks for resources and names no cgroup
// parent gets a pod cgroup of cri-compose's with those limits, which the
// infra container and the pod's containers run below; removing the pod
// removes it. One that names a parent (a kubelet's) keeps it.
func TestPodCgroup(t *testing.T) {
	t.Parallel()
	e := newCRIEnv(t)
	cfg := e.podConfig("pooled")
	cfg.Linux = &runtime.LinuxPodSandboxConfig{Resources: &runtime.LinuxContainerResources{
		CpuShares: 256, CpuQuota: 20000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20}}
	project := sandbox.ProjectName(cfg.GetMetadata())
	id := e.runPod(cfg)
	want := "/cri-compose/" + project
	in, err := e.d.ContainerInspect(e.ctx(), id)
	if err != nil {
		t.Fatal(err)
	}
	if in.HostConfig.CgroupParent != want {
		t.Fatalf("infra container's cgroup parent %q, want %q", in.HostConfig.CgroupParent, want)
	}
	mem, cpu, err := suite.HostCgroupLimits(want)
	if err != nil {
		t.Fatalf("read the pod cgroup: %v", err)
	}
	if mem != fmt.Sprint(64<<20) || cpu != "20000 100000" {
		t.Errorf("pod cgroup %s: memory %s, CPU %q; want %d and \"20000 100000\"", want, mem, cpu, 64<<20)
	}

	cid := e.runCtr(id, cfg, ctrConfig("app", "sleep 100"))
	e.waitCtrState(cid, runtime.ContainerState_CONTAINER_RUNNING, 10*time.Second)
	ci, err := e.d.ContainerInspect(e.ctx(), cid)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", ci.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), want+"/") {
		t.Errorf("the container's process is not below the pod cgroup %s:\n%s", want, b)
	}

	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if dirs := suite.HostCgroupPaths(want); len(dirs) != 0 {
		t.Errorf("pod cgroup %s still there: %v", want, dirs)
	}

	// A kubelet names the pod cgroup it made: cri-compose makes none.
	named := e.podConfig("named")
	named.Linux = &runtime.LinuxPodSandboxConfig{CgroupParent: "/cri-compose-test-named",
		Resources: &runtime.LinuxContainerResources{MemoryLimitInBytes: 64 << 20}}
	nid := e.runPod(named)
	if in, err := e.d.ContainerInspect(e.ctx(), nid); err != nil || in.HostConfig.CgroupParent != "/cri-compose-test-named" {
		t.Errorf("infra container's cgroup parent %q (%v), want the one the sandbox names", in.HostConfig.CgroupParent, err)
	}
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: nid}); err != nil {
		t.Fatal(err)
	}
	// The engine leaves the (now empty) parent it was given to its maker.
	for _, d := range suite.HostCgroupPaths("/cri-compose-test-named") {
		if err := os.Remove(d); err != nil {
			t.Errorf("remove the test's cgroup %s: %v", d, err)
		}
	}
}
