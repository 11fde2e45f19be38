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

	annotationContainerHash = "io.kubernetes.container.hash"
	// The hash without resources, as kubelet named it when it resized
	// in place before it left resources out of the hash itself.
	annotationContainerHashNoResources = "io.kubernetes.container.hashWithoutResources"
	annotationRestartCount             = "io.kubernetes.container.restartCount"
	annotationTerminationPath          = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationPolicy        = "io.kubernetes.container.terminationMessagePolicy"
	annotationPodGracePeriod           = "io.kubernetes.pod.terminationGracePeriod"
	annotationContainerInitMarker      = "vk-cri.cri-compose.io/init-container"
	// annotationMemoryRequest is the memory request a container was made
	// with, in bytes: CRI reports no request back, and a resize of it
	// alone must still be told (resize.go).
	annotationMemoryRequest = "vk-cri.cri-compose.io/memory-request"
)
