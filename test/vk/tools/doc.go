// Package tools pins the control-plane binaries that the vk-cri end-to-end
// suite (test/vk) runs: kube-apiserver from k8s.io/kubernetes and etcd's
// server. It is a module of its own so that neither reaches the product's
// go.mod; the suite builds them once per version into the user's cache dir.
package tools
