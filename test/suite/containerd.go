package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"

	"github.com/cri-compose/cri-compose/pkg/pause"
	"github.com/cri-compose/cri-compose/test/images"
)

// CNIBin is where Debian's containernetworking-plugins puts the plugins
// (hack/ensure-tools.sh installs it).
const CNIBin = "/usr/lib/cni"

// Containerd is a containerd of a test's own (Debian's package, 1.6 on
// Debian 12) with its CRI plugin: its config, root, state, sockets and CNI
// network all under Dir, apart from the containerd that the machine's
// Docker Engine uses. The tests that put cri-compose beside the field's own
// runtime use it: vk-cri on containerd, the log benchmark.
type Containerd struct {
	Dir, Sock, Log string
	CRI            internalapi.RuntimeService
}

// StartContainerd starts containerd with the CRI plugin on a CNI bridge of
// its own named for tag (at most 8 characters), imports each image archive
// (a `docker save` tar written by the function) and the pause image it runs
// sandboxes with, and stops it all when t ends, its sandboxes first. It
// skips t (fails it under CI) when containerd or the CNI plugins are
// missing.
func StartContainerd(t testing.TB, dir, tag string, archives map[string]func(*os.File) error) *Containerd {
	t.Helper()
	for _, bin := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			images.SkipOrFail(t, "%s not found (apt-get install containerd; hack/ensure-tools.sh does): %v", bin, err)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(CNIBin, p)); err != nil {
			images.SkipOrFail(t, "CNI plugin %s missing (apt-get install containernetworking-plugins; hack/ensure-tools.sh does): %v", p, err)
		}
	}
	c := &Containerd{Dir: dir, Sock: filepath.Join(dir, "containerd.sock"), Log: filepath.Join(dir, "containerd.log")}
	for _, d := range []string{"net.d", "ipam", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// The network: a bridge named and addressed for this run (a /24 of
	// 10.247.0.0/16 that no local interface has), without IP masquerading,
	// so that nothing outside the bridge and its veths changes.
	bridge := "ctd" + tag // under IFNAMSIZ
	subnet, err := freeSubnet(tag)
	if err != nil {
		t.Fatal(err)
	}
	conflist, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "ctd-" + tag,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": subnet}}},
				"dataDir": filepath.Join(dir, "ipam"),
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "net.d", "10-ctd.conflist"), conflist, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(containerdConfig(dir, c.Sock, pause.Ref())), 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	proc := &Process{Name: "containerd", Bin: "containerd", Args: []string{"--config", filepath.Join(dir, "config.toml")}, LogFile: c.Log, OwnGroup: true}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Sandboxes first: their shims outlive containerd otherwise.
		if c.CRI != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			sbs, err := c.CRI.ListPodSandbox(ctx, nil)
			if err != nil {
				t.Errorf("containerd: list sandboxes: %v", err)
			}
			for _, sb := range sbs {
				if err := c.CRI.StopPodSandbox(ctx, sb.Id); err != nil {
					t.Errorf("containerd: stop sandbox %s: %v", sb.Id, err)
				}
				if err := c.CRI.RemovePodSandbox(ctx, sb.Id); err != nil {
					t.Errorf("containerd: remove sandbox %s: %v", sb.Id, err)
				}
			}
			cancel()
		}
		_, _ = proc.Stop(syscall.SIGTERM)
		// The bridge plugin leaves its bridge behind.
		if out, err := exec.Command("ip", "link", "delete", bridge).CombinedOutput(); err != nil && !bytes.Contains(out, []byte("Cannot find device")) {
			t.Logf("ip link delete %s: %v: %s", bridge, err, out)
		}
	})
	if err := WaitSocket(c.Sock, 30*time.Second, nil); err != nil {
		t.Fatalf("containerd: %v\n%s", err, Tail(c.Log, 30))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	rt, err := remote.NewRemoteRuntimeServiceBuilder().
		WithEndpoint("unix://" + c.Sock).
		WithConnectionTimeout(time.Minute).
		WithUseStreaming(false).
		Build(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	c.CRI = rt
	// The CRI plugin reports ready once it has loaded the CNI config.
	Eventually(t, "containerd's CRI runtime and network ready", 30*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := rt.Status(ctx, false)
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range st.GetStatus().GetConditions() {
			if !cond.Status {
				return false, fmt.Sprintf("%s: %s %s", cond.Type, cond.Reason, cond.Message)
			}
		}
		return true, ""
	})

	// Images: containerd pulls only from registries, and none is reachable,
	// so the test imports `docker save` archives.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := map[string]func(*os.File) error{"pause.tar": func(f *os.File) error { return pause.Archive(f) }}
	for name, write := range archives {
		all[name] = write
	}
	for name, write := range all {
		p := filepath.Join(dir, "images", name)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		err = write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if out, err := exec.CommandContext(ctx, "ctr", "--address", c.Sock, "--namespace", "k8s.io", "images", "import", p).CombinedOutput(); err != nil {
			t.Fatalf("ctr images import %s: %v: %s", name, err, out)
		}
	}
	t.Logf("containerd (%s, bridge %s on %s) ready with images in %v", dir, bridge, subnet, time.Since(start).Round(time.Millisecond))
	return c
}

// containerdConfig is containerd's config (version 2, as containerd 1.6
// reads it) with every path under dir, the CRI plugin on the CNI config in
// dir/net.d, and sandboxes from the pause image.
func containerdConfig(dir, sock, pauseImage string) string {
	q := strconv.Quote
	return `version = 2
root = ` + q(filepath.Join(dir, "root")) + `
state = ` + q(filepath.Join(dir, "state")) + `
# Snapshotters this host has no use for (they only log errors).
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = ` + q(sock) + `
[ttrpc]
  address = ` + q(sock+".ttrpc") + `
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = ` + q(filepath.Join(dir, "opt")) + `
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = ` + q(pauseImage) + `
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # Without it, on hosts whose bounding set lacks CAP_SYS_RESOURCE (such as
  # ours), every sandbox fails: runc cannot set the pause container's -998
  # ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Network namespaces under state, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      # runc's state too (default /run/containerd/runc). The shims'
      # sockets stay in /run/containerd/s: containerd 1.6 has no setting for
      # it; their names hash this containerd's address, so none is shared.
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = ` + q(filepath.Join(dir, "runc")) + `
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = ` + q(CNIBin) + `
    conf_dir = ` + q(filepath.Join(dir, "net.d")) + `
`
}

// freeSubnet picks a /24 of 10.247.0.0/16, starting from one chosen by
// tag, that no local interface address falls in (the engine's networks
// are 172.17.0.0/16 and the pools cri-compose and the tests use).
func freeSubnet(tag string) (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	h := fnv.New32a()
	h.Write([]byte(tag))
	first := int(h.Sum32() % 256)
	for i := range 256 {
		_, n, _ := net.ParseCIDR(fmt.Sprintf("10.247.%d.0/24", (first+i)%256))
		used := false
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (n.Contains(ipn.IP) || ipn.Contains(n.IP)) {
				used = true
			}
		}
		if !used {
			return n.String(), nil
		}
	}
	return "", fmt.Errorf("no free /24 in 10.247.0.0/16")
}
