// Command etcd is etcd's server, built from the Go module proxy for the
// vk-cri end-to-end tests (test/vk), which start it beside kube-apiserver.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
