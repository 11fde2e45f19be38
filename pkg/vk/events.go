package vk

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// watchEvents wakes the pod workers when the runtime says one of their
// containers changed: through CRI GetContainerEvents, or, when the
// runtime does not offer it, by listing the runtime every RelistPeriod
// and comparing (kubelet's PLEG). A broken stream is reopened with
// back-off; every worker is woken when it is (back), since events may
// have been missed.
func (p *Provider) watchEvents(ctx context.Context) {
	delay := time.Second
	for ctx.Err() == nil {
		ch := make(chan *runtimeapi.ContainerEventResponse, 128)
		errc := make(chan error, 1)
		sctx, cancel := context.WithCancel(ctx)
		opened := false
		go func() {
			errc <- p.rt.GetContainerEvents(sctx, ch, func(runtimeapi.RuntimeService_GetContainerEventsClient) {
				opened = true
				klog.V(2).InfoS("Container event stream open")
				p.wakeAll()
			})
		}()
		var err error
	loop:
		for {
			select {
			case ev := <-ch:
				p.routeEvent(ctx, ev)
			case err = <-errc:
				break loop
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if isUnimplemented(err) {
			klog.InfoS("The runtime has no container events; relisting instead", "period", p.cfg.RelistPeriod)
			p.relist(ctx)
			return
		}
		if opened {
			delay = time.Second
		}
		klog.InfoS("Container event stream broken; reopening", "err", err, "after", delay)
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(delay):
		}
		p.wakeAll()
		delay = min(2*delay, 30*time.Second)
	}
}

// routeEvent wakes the worker of the pod the event is about.
func (p *Provider) routeEvent(ctx context.Context, ev *runtimeapi.ContainerEventResponse) {
	uid := ev.GetPodSandboxStatus().GetMetadata().GetUid()
	if uid == "" {
		cs, err := p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{Id: ev.ContainerId})
		if err == nil && len(cs) == 1 {
			uid = cs[0].Labels[labelPodUID]
		}
	}
	klog.V(4).InfoS("Container event", "container", ev.ContainerId, "type", ev.ContainerEventType, "podUID", uid)
	if uid == "" {
		return
	}
	p.wakePod(types.UID(uid))
}

func (p *Provider) wakePod(uid types.UID) {
	p.mu.Lock()
	w := p.workers[uid]
	p.mu.Unlock()
	if w != nil {
		w.poke()
	}
}

func (p *Provider) wakeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		w.poke()
	}
}

// relist lists this node's containers and sandboxes every RelistPeriod and
// wakes the workers of those whose state changed.
func (p *Provider) relist(ctx context.Context) {
	seen := map[string]string{} // id → state
	sel := map[string]string{labelNode: p.cfg.NodeName}
	t := p.clock.NewTicker(p.cfg.RelistPeriod)
	defer t.Stop()
	for {
		now := map[string]string{}
		changed := map[string]bool{}
		cs, err1 := p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
		sbs, err2 := p.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
		if err1 == nil && err2 == nil {
			for _, c := range cs {
				now[c.Id] = c.State.String()
				if seen[c.Id] != now[c.Id] {
					changed[c.Labels[labelPodUID]] = true
				}
			}
			for _, sb := range sbs {
				now[sb.Id] = sb.State.String()
				if seen[sb.Id] != now[sb.Id] {
					changed[sb.GetMetadata().GetUid()] = true
				}
			}
			for id := range seen {
				if _, ok := now[id]; !ok {
					changed["*"] = true // gone: cheap enough to wake all
				}
			}
			seen = now
			if changed["*"] {
				p.wakeAll()
			} else {
				for uid := range changed {
					p.wakePod(types.UID(uid))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
