package vk

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	critesting "k8s.io/cri-api/pkg/apis/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// cidrRuntime records the pod CIDRs it is given and refuses the first
// refuse of them, as cri-compose does while pods are on another subnet.
type cidrRuntime struct {
	*critesting.FakeRuntimeService
	mu     sync.Mutex
	got    []string
	refuse int
}

func (r *cidrRuntime) UpdateRuntimeConfig(_ context.Context, c *runtimeapi.RuntimeConfig) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, c.GetNetworkConfig().GetPodCidr())
	if r.refuse > 0 {
		r.refuse--
		return status.Error(codes.FailedPrecondition, "pods on another subnet")
	}
	return nil
}

func (r *cidrRuntime) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// TestSyncPodCIDR: before the Node exists --pod-cidr goes to the runtime
// at once; the Node's podCIDRs, once set, win, are tried again every
// status period while the runtime refuses them, and not again once taken.
func TestSyncPodCIDR(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	clk := testingclock.NewFakeClock(time.Now())
	rt := &cidrRuntime{FakeRuntimeService: critesting.NewFakeRuntimeService()}
	p := &Provider{cfg: Config{NodeName: "n1", Client: client, PodCIDR: "10.1.0.0/24"}, rt: &Runtime{RuntimeService: rt}, clock: clk}
	done := make(chan struct{})
	go func() { defer close(done); p.syncPodCIDR(ctx) }()

	waitCalls := func(want ...string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return slices.Equal(rt.calls(), want) && clk.HasWaiters(), nil
		})
		if err != nil {
			t.Fatalf("pod CIDRs given to the runtime: %q, want %q", rt.calls(), want)
		}
	}
	waitCalls("10.1.0.0/24")

	rt.mu.Lock()
	rt.refuse = 1
	rt.mu.Unlock()
	if _, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec: v1.NodeSpec{PodCIDR: "10.2.0.0/24", PodCIDRs: []string{"10.2.0.0/24", "fd00:2::/64"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(statusPeriod)
	waitCalls("10.1.0.0/24", "10.2.0.0/24,fd00:2::/64") // refused
	clk.Step(statusPeriod)
	waitCalls("10.1.0.0/24", "10.2.0.0/24,fd00:2::/64", "10.2.0.0/24,fd00:2::/64") // taken
	clk.Step(statusPeriod)
	waitCalls("10.1.0.0/24", "10.2.0.0/24,fd00:2::/64", "10.2.0.0/24,fd00:2::/64") // nothing more
	cancel()
	<-done
}

func TestCheckPodCIDR(t *testing.T) {
	for in, ok := range map[string]bool{
		"": true, "10.1.0.0/24": true, "10.1.0.0/24,fd00:1::/64": true,
		"10.1.0.0": false, "10.1.0.0/24,10.2.0.0/24": false, "10.1.0.0/24,fd00:1::/64,10.2.0.0/24": false,
	} {
		if err := CheckPodCIDR(in); (err == nil) != ok {
			t.Errorf("CheckPodCIDR(%q) = %v, want ok %v", in, err, ok)
		}
	}
}
