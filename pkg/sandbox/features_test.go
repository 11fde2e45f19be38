package sandbox

import (
	"errors"
	"testing"

	"github.com/moby/moby/api/types/mount"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestRecursiveReadOnlyMount(t *testing.T) {
	in := func(m *runtime.Mount) ContainerInput {
		return ContainerInput{SandboxID: "sb", Sandbox: &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"}},
			Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "c"}, Image: &runtime.ImageSpec{Image: "busybox"},
				Mounts: []*runtime.Mount{m}}}
	}
	rro := &runtime.Mount{HostPath: "/data", ContainerPath: "/mnt", Readonly: true, RecursiveReadOnly: true}
	// Engine API 1.41: refused, never silently weaker.
	if _, err := ContainerSpec(in(rro), Host{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("API 1.41: %v, want unsupported", err)
	}
	spec, err := ContainerSpec(in(rro), Host{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.HostConfig.Mounts) != 1 || len(spec.HostConfig.Binds) != 0 {
		t.Fatalf("mounts %+v binds %v", spec.HostConfig.Mounts, spec.HostConfig.Binds)
	}
	m := spec.HostConfig.Mounts[0]
	if m.Type != mount.TypeBind || m.Source != "/data" || m.Target != "/mnt" || !m.ReadOnly ||
		m.BindOptions == nil || !m.BindOptions.ReadOnlyForceRecursive || m.BindOptions.Propagation != mount.PropagationRPrivate {
		t.Errorf("mount %+v %+v", m, m.BindOptions)
	}
	svc := Service("c", spec.Config, spec.HostConfig)
	if len(svc.Volumes) != 1 || svc.Volumes[0].Bind == nil || svc.Volumes[0].Bind.Recursive != "readonly" {
		t.Errorf("compose volumes %+v", svc.Volumes)
	}
	for _, bad := range []*runtime.Mount{
		{HostPath: "/data", ContainerPath: "/mnt", Readonly: false, RecursiveReadOnly: true},
		{HostPath: "/data", ContainerPath: "/mnt", Readonly: true, RecursiveReadOnly: true, Propagation: runtime.MountPropagation_PROPAGATION_HOST_TO_CONTAINER},
		{HostPath: "/data", ContainerPath: "/mnt", Readonly: true, RecursiveReadOnly: true, Propagation: runtime.MountPropagation_PROPAGATION_BIDIRECTIONAL},
	} {
		if _, err := ContainerSpec(in(bad), Host{RecursiveReadOnly: true}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: %v, want invalid", bad, err)
		}
	}
}

// A plain read-only mount is read-only at the top only, on every engine:
// a Bind with "ro" before API 1.44, a Mount that says non-recursive from
// it on (where a read-only Bind is recursive).
func TestReadOnlyMountNonRecursive(t *testing.T) {
	in := ContainerInput{SandboxID: "sb", Sandbox: &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"}},
		Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "c"}, Image: &runtime.ImageSpec{Image: "busybox"},
			Mounts: []*runtime.Mount{{HostPath: "/data", ContainerPath: "/mnt", Readonly: true, Propagation: runtime.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}}}}
	old, err := ContainerSpec(in, Host{})
	if err != nil {
		t.Fatal(err)
	}
	if len(old.HostConfig.Mounts) != 0 || len(old.HostConfig.Binds) != 1 || old.HostConfig.Binds[0] != "/data:/mnt:ro,rslave" {
		t.Errorf("API 1.41: mounts %+v binds %q", old.HostConfig.Mounts, old.HostConfig.Binds)
	}
	cur, err := ContainerSpec(in, Host{RecursiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.HostConfig.Mounts) != 1 || len(cur.HostConfig.Binds) != 0 {
		t.Fatalf("API 1.44: mounts %+v binds %q", cur.HostConfig.Mounts, cur.HostConfig.Binds)
	}
	m := cur.HostConfig.Mounts[0]
	if bo := m.BindOptions; m.Type != mount.TypeBind || m.Source != "/data" || m.Target != "/mnt" || !m.ReadOnly || bo == nil ||
		!bo.ReadOnlyNonRecursive || bo.ReadOnlyForceRecursive || !bo.CreateMountpoint || bo.Propagation != mount.PropagationRSlave {
		t.Errorf("API 1.44: mount %+v %+v", m, m.BindOptions)
	}
	svc := Service("c", cur.Config, cur.HostConfig)
	if len(svc.Volumes) != 1 || svc.Volumes[0].Bind == nil || svc.Volumes[0].Bind.Recursive != "writable" ||
		svc.Volumes[0].Bind.Propagation != "rslave" || !bool(svc.Volumes[0].Bind.CreateHostPath) || !svc.Volumes[0].ReadOnly {
		t.Errorf("compose volumes %+v", svc.Volumes)
	}
}

func TestUserNamespaceRefused(t *testing.T) {
	pod := func(u *runtime.UserNamespace) *runtime.PodSandboxConfig {
		return &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"},
			Linux: &runtime.LinuxPodSandboxConfig{SecurityContext: &runtime.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtime.NamespaceOption{UsernsOptions: u}}}}
	}
	if _, err := SandboxSpec(pod(nil), Host{}); err != nil {
		t.Errorf("no user namespace asked: %v", err)
	}
	if _, err := SandboxSpec(pod(&runtime.UserNamespace{Mode: runtime.NamespaceMode_NODE}), Host{}); err != nil {
		t.Errorf("the host's: %v", err)
	}
	podNS := &runtime.UserNamespace{Mode: runtime.NamespaceMode_POD,
		Uids: []*runtime.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}},
		Gids: []*runtime.IDMapping{{HostId: 65536, ContainerId: 0, Length: 65536}}}
	if _, err := SandboxSpec(pod(podNS), Host{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a pod's own: %v, want unsupported", err)
	}
	if _, err := SandboxSpec(pod(&runtime.UserNamespace{Mode: runtime.NamespaceMode_CONTAINER}), Host{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("CONTAINER: %v, want invalid", err)
	}
}

func TestCDIDevices(t *testing.T) {
	in := func(names ...string) ContainerInput {
		var devs []*runtime.CDIDevice
		for _, n := range names {
			devs = append(devs, &runtime.CDIDevice{Name: n})
		}
		return ContainerInput{SandboxID: "sb", Sandbox: &runtime.PodSandboxConfig{Metadata: &runtime.PodSandboxMetadata{Name: "p", Namespace: "n", Uid: "u"}},
			Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "c"}, Image: &runtime.ImageSpec{Image: "busybox"},
				CDIDevices: devs}}
	}
	const a, b = "vendor.example/marker=one", "vendor.example/marker=two"
	// An engine without CDI: refused, never silently without the device.
	if _, err := ContainerSpec(in(a), Host{}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("no CDI: %v, want unsupported", err)
	}
	spec, err := ContainerSpec(in(a, b), Host{CDI: true})
	if err != nil {
		t.Fatal(err)
	}
	reqs := spec.HostConfig.DeviceRequests
	if len(reqs) != 1 || reqs[0].Driver != "cdi" || len(reqs[0].DeviceIDs) != 2 || reqs[0].DeviceIDs[0] != a || reqs[0].DeviceIDs[1] != b {
		t.Errorf("device requests %+v, want one cdi request for %s and %s", reqs, a, b)
	}
	svc := Service("c", spec.Config, spec.HostConfig)
	if len(svc.Devices) != 2 || svc.Devices[0].Source != a || svc.Devices[0].Target != a || svc.Devices[1].Source != b {
		t.Errorf("compose devices %+v, want each CDI name as source and target", svc.Devices)
	}
	if spec, err := ContainerSpec(in(), Host{}); err != nil || len(spec.HostConfig.DeviceRequests) != 0 {
		t.Errorf("no CDI device asked: %v, %+v", err, spec.HostConfig.DeviceRequests)
	}
	for _, bad := range []string{"marker", "vendor.example/marker", "vendor.example/marker=", "/marker=one", "vendor example/marker=one"} {
		if _, err := ContainerSpec(in(bad), Host{CDI: true}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want invalid", bad, err)
		}
	}
}
