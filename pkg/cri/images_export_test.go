package cri

// What the image tests (package cri_test, which runs the image service
// through test/suite's gRPC harness; test/suite imports this package, so
// those tests cannot be internal) read of the package's internals.
var (
	ErrNotFound = errNotFound
	GRPCError   = grpcError
)
