package vk

// Labels and annotations on CRI sandboxes and containers. The io.kubernetes
// ones are kubelet's, so that tools which read them (crictl, runtimes'
// own views) show vk-cri's pods as they show kubelet's.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	// labelNode marks what vk-cri made, with the name of its node: a
	// runtime may serve several kubelets, and vk-cri touches only its own.
	labelNode = "vk-cri.cri-compose.io/node"

	annotationContainerHash       = "io.kubernetes.container.hash"
	annotationRestartCount        = "io.kubernetes.container.restartCount"
	annotationTerminationPath     = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationPolicy   = "io.kubernetes.container.terminationMessagePolicy"
	annotationPodGracePeriod      = "io.kubernetes.pod.terminationGracePeriod"
	annotationContainerInitMarker = "vk-cri.cri-compose.io/init-container"
)
