// Package vk is vk-cri's provider for virtual-kubelet: a kubelet in
// miniature that runs the pods scheduled to its node through a CRI runtime.
//
// It speaks only CRI (k8s.io/cri-client's gRPC clients) and Kubernetes; it
// knows nothing of the runtime behind the socket, so it drives cri-compose
// and any other CRI runtime alike.
//
// The files answer one question each:
//
//   - provider.go: the virtual-kubelet provider (pod lifecycle, notify).
//   - admission.go: kubelet's admit handlers (sysctls, the pod's OS): a
//     pod refused there is Failed and never reaches the runtime.
//   - worker.go: one goroutine per pod that drives CRI toward the pod spec,
//     deciding (podactions.go: computePodActions, a pure plan) apart from
//     acting (podapply.go, which also turns results into waiting reasons).
//   - probes_manager.go, probes_worker.go, probes_runner.go: the prober,
//     as kubelet's: which probes run and their results, one goroutine per
//     probe, and running exec, httpGet, tcpSocket and grpc probes.
//   - sandbox.go, containers.go, env.go, volumes.go, images.go: what the
//     worker asks the runtime for (sandbox and container configs, env,
//     files on disk, image pulls).
//   - volumes_projected.go, token.go, atomic_writer.go, volumes_watch.go:
//     projected volumes and service account tokens (TokenRequest, refreshed
//     as kubelet does), kubelet's atomic-writer layout, and the
//     per-object configMap and secret watches (as kubelet's watch-based
//     managers) that also bring their changes to running pods.
//   - controllers.go: virtual-kubelet's node and pod controllers, wired
//     to read only what the Node authorizer lets a node read.
//   - env_services.go: service link variables (enableServiceLinks).
//   - objects_events.go: virtual-kubelet's events for missing configMaps
//     and secrets, beside kubelet's.
//   - runtimeclass.go: a pod's RuntimeClass → the CRI runtime handler.
//   - restart.go: kubelet's restart policy and crash-loop back-off.
//   - sidecar.go: sidecar containers (init containers with restartPolicy
//     Always): their start gating the next, their restarts, and their stop
//     after the app containers.
//   - ephemeral.go, resize.go, logrotate.go, podcidr.go: ephemeral
//     containers (kubectl debug), in-place resize, container log rotation
//     and the Node's pod CIDR handed to the runtime, each as kubelet's.
//   - oomscore.go, podresources.go: kubelet's OOM score adjustments by QoS
//     class, and pod-level resources handed to the runtime's pod cgroup
//     (or refused at admission where it has none).
//   - status.go: CRI state → v1.PodStatus, a pure function.
//   - events.go: the runtime's container event stream (or a relist) that
//     wakes the workers.
//   - node.go, hostinfo.go: the Node object, its capacity, allocatable
//     (less --kube-reserved and --system-reserved) and conditions.
//   - logs.go, streaming.go, runningpods.go, server.go: the kubelet API
//     (logs from the CRI log files; exec, attach and port-forward proxied
//     to the runtime's streaming server; the pods the runtime runs; TLS).
package vk
