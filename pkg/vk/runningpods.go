package vk

import (
	"context"
	"fmt"
	"net/http"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// ServeRunningPods serves GET /runningpods/ as kubelet does: the pods the
// runtime runs, not those the node is meant to run (/pods), as a v1
// PodList.
func (p *Provider) ServeRunningPods(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/runningpods/" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "only GET is allowed", http.StatusMethodNotAllowed)
		return
	}
	pods, err := p.runningPods(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	data, err := runtime.Encode(scheme.Codecs.LegacyCodec(v1.SchemeGroupVersion), pods)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(data); err != nil {
		klog.V(3).InfoS("Writing the running pods", "err", err)
	}
}

// runningPods is kubelet's GetRunningPods (the runtime's GetPods without
// the exited, ToAPIPod of each): vk-cri's ready sandboxes and running
// containers on this node, grouped by pod UID; each pod has its name,
// namespace and UID, and its containers their name and image. The newest
// pod comes first, and in each pod the newest container.
func (p *Provider) runningPods(ctx context.Context) (*v1.PodList, error) {
	sel := map[string]string{labelNode: p.cfg.NodeName}
	sbs, err := p.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel,
		State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	cs, err := p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel,
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	sort.SliceStable(sbs, func(i, j int) bool {
		if sbs[i].CreatedAt != sbs[j].CreatedAt {
			return sbs[i].CreatedAt > sbs[j].CreatedAt
		}
		return sbs[i].Id < sbs[j].Id
	})
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].CreatedAt != cs[j].CreatedAt {
			return cs[i].CreatedAt > cs[j].CreatedAt
		}
		return cs[i].Id < cs[j].Id
	})
	type runningPod struct {
		pod       v1.Pod
		createdAt int64
	}
	byUID := map[types.UID]*runningPod{}
	var order []*runningPod
	add := func(uid types.UID, name, ns string) *runningPod {
		rp, ok := byUID[uid]
		if !ok {
			rp = &runningPod{}
			rp.pod.UID, rp.pod.Name, rp.pod.Namespace = uid, name, ns
			byUID[uid] = rp
			order = append(order, rp)
		}
		return rp
	}
	// As kubelet's: the pod's CreatedAt is its oldest ready sandbox's
	// (the last one the newest-first loop sees).
	for _, sb := range sbs {
		md := sb.GetMetadata()
		if md == nil {
			continue
		}
		add(types.UID(md.Uid), md.Name, md.Namespace).createdAt = sb.CreatedAt
	}
	for _, c := range cs {
		if c.GetMetadata() == nil || c.GetImage() == nil {
			continue
		}
		rp := add(types.UID(c.Labels[labelPodUID]), c.Labels[labelPodName], c.Labels[labelPodNamespace])
		rp.pod.Spec.Containers = append(rp.pod.Spec.Containers, v1.Container{Name: c.GetMetadata().GetName(), Image: c.GetImage().GetImage()})
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].createdAt > order[j].createdAt })
	list := &v1.PodList{}
	for _, rp := range order {
		list.Items = append(list.Items, rp.pod)
	}
	return list, nil
}
