// Package tools pins a current Docker Engine for the tests that run one
// beside the machine's (test/privengine with Options.Current): dockerd from
// github.com/moby/moby/v2 (Docker Engine 29), containerd and its runc shim
// from github.com/containerd/containerd/v2. It is a module of its own so
// that neither reaches the product's go.mod; test/toolcache builds them
// once per version into the user's cache dir.
package tools
