//go:build tools

// Package tools pins the conformance tools: critest, cri-tools' CRI
// validation suite (a ginkgo test binary, built with
// `go test -c -o critest sigs.k8s.io/cri-tools/cmd/critest` from this
// module), and the ginkgo CLI (a tool of this module) that
// `critest -parallel=N` runs. test/conformance/run builds both into
// os.UserCacheDir()/cri-compose/tools and reuses them on later runs.
//
// The imports are those of cmd/critest's test file, so that `go mod tidy`
// here keeps every module the test binary needs.
package tools

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/cri-tools/pkg/benchmark"
	_ "sigs.k8s.io/cri-tools/pkg/common"
	_ "sigs.k8s.io/cri-tools/pkg/framework"
	_ "sigs.k8s.io/cri-tools/pkg/validate"
	_ "sigs.k8s.io/cri-tools/pkg/version"
)
