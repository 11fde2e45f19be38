package cri_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

func TestParseSubnets(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.0/24":                   "[10.244.1.0/24]",
		"10.244.1.7/24, fd00:10:244::/64": "[10.244.1.0/24 fd00:10:244::/64]",
	} {
		got, err := cri.ParseSubnets(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("ParseSubnets(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "10.244.1.0", "10.1.0.0/16,10.2.0.0/16", "fd00::/64,fd01::/64", "10.1.0.0/16,"} {
		if got, err := cri.ParseSubnets(in); err == nil {
			t.Errorf("ParseSubnets(%q) = %v, want an error", in, got)
		}
	}
}

// TestUpdateRuntimeConfigPodCIDR: the node's pod CIDR, as kubelet sends
// it, becomes the pod network's subnets (IPv4 and IPv6), and pods get
// their addresses from it; while pods are on another subnet the call is
// refused and they keep running.
func TestUpdateRuntimeConfigPodCIDR(t *testing.T) {
	network := "cri-test-podcidr-" + randHex(4)
	e := newCRIEnvWith(t, cri.Config{Network: network})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.d.NetworkRemove(ctx, network); err != nil && !dockerapi.IsNotFound(err) {
			t.Logf("cleanup: %v", err)
		}
	})
	// Subnets no other test network is likely to hold (10.200-10.239:
	// the networking suite's cluster CIDR is 10.244.0.0/16).
	n := rand.IntN(200) + 20
	v4 := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 200+rand.IntN(40), n))
	v6 := netip.MustParsePrefix(fmt.Sprintf("fd00:cc:%x::/64", rand.IntN(0xffff)))
	podCIDR := v4.String() + "," + v6.String()
	update := func(cidr string) error {
		_, err := e.rt().UpdateRuntimeConfig(e.ctx(), &runtime.UpdateRuntimeConfigRequest{
			RuntimeConfig: &runtime.RuntimeConfig{NetworkConfig: &runtime.NetworkConfig{PodCidr: cidr}}})
		return err
	}

	wantCode(t, update("10.1.0.0/16,10.2.0.0/16"), codes.InvalidArgument, "address family")
	wantCode(t, update("not-a-cidr"), codes.InvalidArgument, "pod CIDR")

	// A pod on the engine's own subnet: the pod CIDR waits for it.
	old := e.podConfig("podcidr-old")
	oldID := e.runPod(old)
	oldIP := e.podStatus(oldID).GetNetwork().GetIp()
	if a, err := netip.ParseAddr(oldIP); err != nil || v4.Contains(a) {
		t.Fatalf("pod before the pod CIDR: IP %q (%v)", oldIP, err)
	}
	wantCode(t, update(podCIDR), codes.FailedPrecondition, network, "1 containers attached", podCIDR)
	if st := e.podStatus(oldID); st.GetState() != runtime.PodSandboxState_SANDBOX_READY || st.GetNetwork().GetIp() != oldIP {
		t.Fatalf("after a refused pod CIDR the pod is %s with IP %s, want ready with %s", st.GetState(), st.GetNetwork().GetIp(), oldIP)
	}
	if _, err := e.rt().StopPodSandbox(e.ctx(), &runtime.StopPodSandboxRequest{PodSandboxId: oldID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt().RemovePodSandbox(e.ctx(), &runtime.RemovePodSandboxRequest{PodSandboxId: oldID}); err != nil {
		t.Fatal(err)
	}

	// With no pod left it takes, and says so again and again (kubelet
	// calls at every change).
	for range 2 {
		if err := update(podCIDR); err != nil {
			t.Fatalf("UpdateRuntimeConfig %s with no pod: %v", podCIDR, err)
		}
	}
	have, _, err := e.d.NetworkSubnets(e.ctx(), network)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(have, v4) || !slices.Contains(have, v6) || len(have) != 2 {
		t.Fatalf("pod network subnets %v, want %s", have, podCIDR)
	}
	// A node agent can tell from the verbose Status that it took.
	st, err := e.rt().Status(e.ctx(), &runtime.StatusRequest{Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		PodSubnets []string `json:"podSubnets"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["config"]), &info); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.PodSubnets, []string{v4.String(), v6.String()}) {
		t.Errorf("Status says podSubnets %v, want %s", info.PodSubnets, podCIDR)
	}

	checkIPs := func(id, when string) {
		t.Helper()
		net := e.podStatus(id).GetNetwork()
		ip, err := netip.ParseAddr(net.GetIp())
		if err != nil || !v4.Contains(ip) {
			t.Errorf("%s: pod IP %q, want one in %s", when, net.GetIp(), v4)
		}
		if len(net.GetAdditionalIps()) != 1 {
			t.Fatalf("%s: additional IPs %v, want one in %s", when, net.GetAdditionalIps(), v6)
		}
		if ip6, err := netip.ParseAddr(net.GetAdditionalIps()[0].GetIp()); err != nil || !v6.Contains(ip6) {
			t.Errorf("%s: additional IP %q, want one in %s", when, net.GetAdditionalIps()[0].GetIp(), v6)
		}
	}
	pod := e.podConfig("podcidr")
	id := e.runPod(pod)
	checkIPs(id, "new pod")
	if err := update(podCIDR); err != nil { // the same, with a pod on it
		t.Fatalf("the same pod CIDR again, with a pod: %v", err)
	}
	e.restart(nil)
	checkIPs(id, "after a restart")
}
