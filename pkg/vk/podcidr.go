package vk

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

// syncPodCIDR hands the node's pod CIDR to the runtime through CRI
// UpdateRuntimeConfig, as kubelet's updatePodCIDR does: the Node's
// spec.podCIDRs (given by kube-controller-manager's --allocate-node-cidrs
// or by an admin), else Config.PodCIDR. It reads the Node every
// statusPeriod, as kubelet does at its node status sync, and calls again
// until the runtime takes it (cri-compose refuses while pods are on
// another subnet) and whenever it changes. Until the Node can first be
// read it tries every second, so that the first pods already get their
// addresses from it.
func (p *Provider) syncPodCIDR(ctx context.Context) {
	applied, lastErr, tried := "", "", false
	for {
		want, known := p.podCIDR(ctx)
		if want != "" && want != applied {
			tried = true
			err := p.rt.UpdateRuntimeConfig(ctx, &runtimeapi.RuntimeConfig{NetworkConfig: &runtimeapi.NetworkConfig{PodCidr: want}})
			switch {
			case err == nil:
				applied, lastErr = want, ""
				klog.InfoS("Pod CIDR handed to the runtime", "podCIDR", want)
			case ctx.Err() != nil:
				return
			case err.Error() != lastErr: // once per cause, not every period
				lastErr = err.Error()
				klog.ErrorS(err, "The runtime did not take the pod CIDR; trying again", "podCIDR", want, "every", statusPeriod)
			}
		}
		period := statusPeriod
		if !tried && !known { // the API server is not reached yet
			period = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(period):
		}
	}
}

// podCIDR is the Node's spec.podCIDRs, comma-separated as kubelet sends
// them, else the configured one; known is false when the Node could not
// be read, and the choice is left to the next try. A Node not registered
// yet has none: the configured one applies before the first pod comes.
func (p *Provider) podCIDR(ctx context.Context) (cidr string, known bool) {
	if p.cfg.Client != nil {
		n, err := p.cfg.Client.CoreV1().Nodes().Get(ctx, p.cfg.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			klog.V(2).InfoS("Node not read for its pod CIDR", "node", p.cfg.NodeName, "err", err)
			return "", false
		case len(n.Spec.PodCIDRs) > 0:
			return strings.Join(n.Spec.PodCIDRs, ","), true
		case n.Spec.PodCIDR != "":
			return n.Spec.PodCIDR, true
		}
	}
	return p.cfg.PodCIDR, true
}

// CheckPodCIDR checks a comma-separated pod CIDR: at most one per address
// family, as kube-controller-manager allocates.
func CheckPodCIDR(s string) error {
	if s == "" {
		return nil
	}
	cidrs, err := netutils.ParseCIDRs(strings.Split(s, ","))
	if err != nil {
		return err
	}
	if len(cidrs) > 2 {
		return fmt.Errorf("%q: more than two CIDRs", s)
	}
	if len(cidrs) == 2 {
		if dual, _ := netutils.IsDualStackCIDRs(cidrs); !dual {
			return fmt.Errorf("%q: two CIDRs of one address family", s)
		}
	}
	return nil
}
