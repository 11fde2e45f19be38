package vk

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Pod folders outlive their pods when a removal stopped half-way (vk-cri
// killed during it) or when a pod's sandbox went while vk-cri was down and
// the pod was deleted meanwhile: nothing would remove them, and their
// tmpfs would stay mounted until a reboot. As kubelet's housekeeping does
// (cleanupOrphanedPodDirs), a periodic sweep removes the folders of pods
// that have no worker and no sandbox in the runtime. A pod that still has
// a sandbox is left to its worker (virtual-kubelet deletes the pods
// Kubernetes no longer has, GetPods).

// orphanSweepPeriod is how often the sweep runs; the first run is one
// period after start, when virtual-kubelet has handed over the node's pods.
const orphanSweepPeriod = time.Minute

// removingPrefix marks a pod folder being removed by the sweep.
const removingPrefix = "..removing-"

// cleanOrphanedPodDirs removes the folders of pods that are gone.
func (p *Provider) cleanOrphanedPodDirs(ctx context.Context) {
	pods := filepath.Join(p.cfg.StateDir, "pods")
	entries, err := os.ReadDir(pods)
	if err != nil || len(entries) == 0 {
		return
	}
	// Every sandbox in the runtime, whatever node name it carries: a pod
	// folder is removed only when nothing could still use it.
	sbs, err := p.rt.ListPodSandbox(ctx, nil)
	if err != nil {
		klog.V(2).InfoS("Not sweeping pod folders: cannot list sandboxes", "err", err)
		return
	}
	live := map[string]bool{}
	for _, sb := range sbs {
		live[sb.GetMetadata().GetUid()] = true
	}
	var gone []string
	p.mu.Lock()
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, removingPrefix) {
			gone = append(gone, filepath.Join(pods, name)) // an earlier sweep's
			continue
		}
		if !e.IsDir() || live[name] || p.workers[types.UID(name)] != nil {
			continue
		}
		// Renamed under the lock, so that a pod added now (CreatePod
		// takes it too) makes a fresh folder, never one being removed.
		// Mounts below move with the folder.
		to := filepath.Join(pods, removingPrefix+name)
		if err := os.Rename(filepath.Join(pods, name), to); err != nil {
			klog.ErrorS(err, "Cannot remove the folder of a pod that is gone", "uid", name)
			continue
		}
		gone = append(gone, to)
	}
	p.mu.Unlock()
	for _, dir := range gone {
		if err := removePodDir(dir); err != nil {
			klog.ErrorS(err, "Cannot remove the folder of a pod that is gone", "path", dir)
			continue
		}
		klog.V(1).InfoS("Removed the folder of a pod that is gone", "uid", strings.TrimPrefix(filepath.Base(dir), removingPrefix))
	}
}
