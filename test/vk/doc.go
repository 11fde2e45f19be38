// Package vk is the end-to-end suite of vk-cri (see vk_test.go). It is a
// module of its own so that its test-only dependencies (controller-runtime's
// envtest) stay out of the product's go.mod; `make test-vk` runs it.
package vk
