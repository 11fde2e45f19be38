package vk

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// runtimeClassGetter reads a RuntimeClass (node.k8s.io/v1) by name.
type runtimeClassGetter func(ctx context.Context, name string) (*nodev1.RuntimeClass, error)

// apiRuntimeClasses reads RuntimeClasses from the API server: one Get per
// sandbox made, which is rare enough not to be worth an informer's watch.
func apiRuntimeClasses(c kubernetes.Interface) runtimeClassGetter {
	return func(ctx context.Context, name string) (*nodev1.RuntimeClass, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return c.NodeV1().RuntimeClasses().Get(ctx, name, metav1.GetOptions{})
	}
}

// runtimeHandler is the CRI runtime handler of the pod's RuntimeClass, as
// kubelet's runtimeclass manager resolves it: "" (the runtime's default)
// without a class or without an API server to ask; a class that does not
// exist is an error in kubelet's words, and the pod waits for it.
func (p *Provider) runtimeHandler(ctx context.Context, pod *v1.Pod) (string, error) {
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName == "" || p.runtimeClasses == nil {
		return "", nil
	}
	name := *pod.Spec.RuntimeClassName
	rc, err := p.runtimeClasses(ctx, name)
	if apierrors.IsNotFound(err) {
		// kubelet reads its lister, whose error names the resource so.
		return "", apierrors.NewNotFound(nodev1.Resource("runtimeclass"), name)
	}
	if err != nil {
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", name, err)
	}
	return rc.Handler, nil
}
