// Package network pins the cluster-network daemons that the networking
// suite of test/vk (make test-networking) runs on each Docker host: flanneld
// for the overlay and CoreDNS for cluster DNS. A module of its own, apart
// from the control plane's, so that neither's dependencies move the other's.
package network
