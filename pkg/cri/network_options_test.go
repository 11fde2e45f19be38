package cri_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/dockerapi/dockertest"
)

// verbose asks Status for its info.
var verbose = &runtime.StatusRequest{Verbose: true}

// networkPending is what a verbose Status says of the pod network's
// options while pods keep it.
func networkPending(t *testing.T) func(*runtime.StatusResponse, error) string {
	return func(r *runtime.StatusResponse, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		var cfg struct {
			NetworkPending *string `json:"networkPending"`
		}
		if err := json.Unmarshal([]byte(r.GetInfo()["config"]), &cfg); err != nil || cfg.NetworkPending == nil {
			t.Fatalf("Status info %q: %v, no networkPending", r.GetInfo()["config"], err)
		}
		return *cfg.NetworkPending
	}
}

// TestPodNetworkOptionsFake: the pod network's bridge options follow the
// configuration: a network made otherwise, with no container on it, is
// made again on its own subnets; with pods on it, it is kept (and Status
// says how it differs) until the first sandbox after they are gone.
func TestPodNetworkOptionsFake(t *testing.T) {
	ctx := context.Background()
	e := newFakeEngine()
	subnets := []netip.Prefix{netip.MustParsePrefix("10.250.7.0/24")}
	// Made by an earlier cri-compose, with the engine's defaults.
	if _, err := e.EnsureNetwork(ctx, "cc-fake", dockerapi.NetworkSpec{Subnets: subnets}); err != nil {
		t.Fatal(err)
	}
	server := func(o dockerapi.BridgeOptions) *cri.Server {
		s, stop := cri.NewFakeServer(cri.Config{StateDir: t.TempDir(), Network: "cc-fake", PodInfraImage: fakeInfra,
			StreamAddress: "127.0.0.1:0", NetworkOptions: o}, fakeEngine{Engine: e}, dockertest.NewEvents())
		t.Cleanup(stop)
		cri.Resync(ctx, s) // as Run does first
		return s
	}
	network := func(when string, want dockerapi.BridgeOptions) {
		t.Helper()
		n, ok := e.Network("cc-fake")
		if !ok || n.Bridge != want || !slices.Equal(n.Subnets, subnets) || n.Labels["io.cri-compose.network"] != "pods" {
			t.Fatalf("%s: pod network %+v (made %v), want options %+v on %v", when, n, ok, want, subnets)
		}
	}
	overlay := dockerapi.BridgeOptions{NoIPMasquerade: true, MTU: 1450}

	s := server(overlay)
	network("no pod on it", overlay)
	if p := networkPending(t)(s.Status(ctx, verbose)); p != "" {
		t.Errorf("pending %q with the network as configured", p)
	}
	a := runFake(t, s, fakePod(t, "a"))

	s = server(dockerapi.BridgeOptions{}) // a restart with the defaults
	network("a pod on it", overlay)
	wantPending := "ip masquerade off (wanted on), mtu 1450 (wanted the engine's default)"
	if p := networkPending(t)(s.Status(ctx, verbose)); p != wantPending {
		t.Errorf("pending %q, want %q", p, wantPending)
	}
	// The pod CIDR it is on already: taken, the options still wait.
	if _, err := s.UpdateRuntimeConfig(ctx, &runtime.UpdateRuntimeConfigRequest{RuntimeConfig: &runtime.RuntimeConfig{
		NetworkConfig: &runtime.NetworkConfig{PodCidr: subnets[0].String()}}}); err != nil {
		t.Fatalf("UpdateRuntimeConfig with the options waiting: %v", err)
	}
	b := runFake(t, s, fakePod(t, "b"))
	network("two pods on it", overlay)
	if _, ok := e.Containers()[a]; !ok {
		t.Fatal("the first pod is gone")
	}

	e.Remove(a)
	e.Remove(b)
	runFake(t, s, fakePod(t, "c"))
	network("the next sandbox once the pods are gone", dockerapi.BridgeOptions{})
	if p := networkPending(t)(s.Status(ctx, verbose)); p != "" {
		t.Errorf("pending %q once made again", p)
	}
}

// TestPodNetworkOptions: with --ip-masq=false --network-mtu=1450 the
// engine makes the pod network with those options, a pod's eth0 has that
// MTU, and nothing masquerades the pods' subnet. A restart with other
// options keeps the network while a pod is on it, and says so; the first
// sandbox after the pod is gone gets the network made anew.
func TestPodNetworkOptions(t *testing.T) {
	network := "cri-test-netopts-" + randHex(4)
	v4 := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(40), rand.IntN(200)+20))
	overlay := dockerapi.BridgeOptions{NoIPMasquerade: true, MTU: 1450}
	e := newCRIEnvWith(t, cri.Config{Network: network, NetworkSubnets: []netip.Prefix{v4}, NetworkOptions: overlay})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.d.NetworkRemove(ctx, network); err != nil && !dockerapi.IsNotFound(err) {
			t.Logf("cleanup: %v", err)
		}
	})
	api, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	// options checks the engine's own view of the network.
	options := func(when, masq, mtu string) {
		t.Helper()
		r, err := api.NetworkInspect(e.ctx(), network, client.NetworkInspectOptions{})
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		o := r.Network.Options
		if o[dockerapi.OptionIPMasquerade] != masq || o[dockerapi.OptionMTU] != mtu {
			t.Errorf("%s: network options %v, want %s=%q, %s=%q", when, o, dockerapi.OptionIPMasquerade, masq, dockerapi.OptionMTU, mtu)
		}
	}
	// eth0MTU runs a pod with a container and reads its eth0's MTU.
	eth0MTU := func(name string) (podID, mtu string) {
		t.Helper()
		pod := e.podConfig(name)
		podID = e.runPod(pod)
		ctr := e.runCtr(podID, pod, ctrConfig("sleeper", "sleep 3600"))
		r, err := e.rt().ExecSync(e.ctx(), &runtime.ExecSyncRequest{ContainerId: ctr, Cmd: []string{"cat", "/sys/class/net/eth0/mtu"}, Timeout: 10})
		if err != nil || r.GetExitCode() != 0 {
			t.Fatalf("%s: reading eth0's MTU: %v %s", name, err, r.GetStderr())
		}
		return podID, strings.TrimSpace(string(r.GetStdout()))
	}
	// masquerades says whether the engine's NAT masquerades the subnet
	// (false, true) or cannot be read (skip).
	masquerades := func() (bool, bool) {
		if _, err := exec.LookPath("iptables"); err != nil {
			t.Logf("no NAT check: %v", err)
			return false, false
		}
		out, err := exec.Command("iptables", "-t", "nat", "-S", "POSTROUTING").Output()
		if err != nil {
			t.Logf("iptables: %v", err)
			return false, false
		}
		for l := range strings.SplitSeq(string(out), "\n") {
			if strings.Contains(l, "-s "+v4.String()) && strings.Contains(l, "MASQUERADE") {
				return true, true
			}
		}
		return false, true
	}

	options("made", "false", "1450")
	podID, mtu := eth0MTU("netopts")
	if mtu != "1450" {
		t.Errorf("eth0 MTU in the pod: %s, want 1450", mtu)
	}
	if on, known := masquerades(); known && on {
		t.Errorf("with --ip-masq=false the engine masquerades %s", v4)
	}
	ip := e.podStatus(podID).GetNetwork().GetIp()

	// Restarted with the defaults, a pod on the network: both kept.
	e.cfg.NetworkOptions = dockerapi.BridgeOptions{}
	e.restart(nil)
	options("after a restart with the defaults, a pod on it", "false", "1450")
	if st := e.podStatus(podID); st.GetState() != runtime.PodSandboxState_SANDBOX_READY || st.GetNetwork().GetIp() != ip {
		t.Fatalf("after the restart the pod is %s with IP %s, want ready with %s", st.GetState(), st.GetNetwork().GetIp(), ip)
	}
	want := "ip masquerade off (wanted on), mtu 1450 (wanted the engine's default)"
	if p := networkPending(t)(e.rt().Status(e.ctx(), verbose)); p != want {
		t.Errorf("Status says %q of the network, want %q", p, want)
	}

	// The pod gone, the next sandbox has the network made anew.
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		t.Fatal(err)
	}
	_, mtu = eth0MTU("netopts-after")
	options("made again", "", "")
	if mtu == "1450" {
		t.Errorf("eth0 MTU in a pod on the network made again: %s, want the engine's default", mtu)
	}
	if on, known := masquerades(); known && !on {
		t.Errorf("with --ip-masq (the default) the engine does not masquerade %s", v4)
	}
	if p := networkPending(t)(e.rt().Status(e.ctx(), verbose)); p != "" {
		t.Errorf("Status says %q of the network made again", p)
	}
	r, err := api.NetworkInspect(e.ctx(), network, client.NetworkInspectOptions{})
	if err != nil || len(r.Network.IPAM.Config) != 1 || r.Network.IPAM.Config[0].Subnet != v4 {
		t.Errorf("network made again: IPAM %+v (%v), want the subnet %s kept", r.Network.IPAM.Config, err, v4)
	}
}
