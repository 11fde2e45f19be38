package vk_test

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A missing configMap or secret gets virtual-kubelet's events (which its
// provider suite waits for) beside kubelet's: a mandatory one holds the
// container in CreateContainerConfigError, an optional one does not.
func TestMissingObjectEvents(t *testing.T) {
	ns := namespace(t)
	mandatory := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mandatory", Namespace: ns},
		Spec: v1.PodSpec{Containers: []v1.Container{func() v1.Container {
			c := busybox("main", "sleep 3600")
			c.Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
				LocalObjectReference: v1.LocalObjectReference{Name: "nocm"}, Key: "k"}}}}
			return c
		}()}},
	})
	optional := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "optional", Namespace: ns},
		Spec: v1.PodSpec{Containers: []v1.Container{func() v1.Container {
			c := busybox("main", "sleep 3600")
			c.Env = []v1.EnvVar{{Name: "Y", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
				LocalObjectReference: v1.LocalObjectReference{Name: "nosec"}, Key: "k", Optional: ptr.To(true)}}}}
			return c
		}()}},
	})
	waitWaiting(t, ns, mandatory.Name, "main", "CreateContainerConfigError", "")
	waitEvent(t, ns, mandatory.Name, "Failed", "Error: ")
	waitEvent(t, ns, mandatory.Name, "MandatoryConfigMapNotFound", `configmap "nocm" not found`)

	waitFor(t, "the optional pod Running", 90*time.Second, func() (bool, string) {
		p := getPod(t, ns, optional.Name)
		return p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue, podSummary(p)
	})
	waitEvent(t, ns, optional.Name, "OptionalSecretNotFound", `skipping optional envvar "Y": secret "nosec" not found`)
}
