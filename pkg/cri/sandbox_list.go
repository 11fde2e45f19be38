package cri

import (
	"context"
	"slices"
	"strings"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ListPodSandbox answers from the store, newest first.
func (s *Server) ListPodSandbox(ctx context.Context, r *runtime.ListPodSandboxRequest) (*runtime.ListPodSandboxResponse, error) {
	if err := s.store.WaitSynced(ctx); err != nil {
		return nil, grpcError(err)
	}
	f := r.GetFilter()
	var out []*runtime.PodSandbox
	s.store.EachSandbox(func(sb sandboxRec) {
		if f != nil {
			if f.GetId() != "" && !strings.HasPrefix(sb.ID, f.GetId()) {
				return
			}
			if f.GetState() != nil && f.GetState().GetState() != sb.State {
				return
			}
			if !matchLabels(f.GetLabelSelector(), sb.Config.GetLabels()) {
				return
			}
		}
		out = append(out, &runtime.PodSandbox{
			Id: sb.ID, Metadata: sb.Config.GetMetadata(), State: sb.State, CreatedAt: sb.CreatedAt,
			Labels: sb.Config.GetLabels(), Annotations: sb.Config.GetAnnotations(),
		})
	})
	slices.SortFunc(out, func(a, b *runtime.PodSandbox) int {
		return newestFirst(recKey{a.CreatedAt, a.Id}, recKey{b.CreatedAt, b.Id})
	})
	return &runtime.ListPodSandboxResponse{Items: out}, nil
}

// matchLabels reports whether labels hold every key=value of selector.
func matchLabels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
