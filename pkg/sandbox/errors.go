package sandbox

import "errors"

// ErrInvalid marks a request that cannot be mapped: missing metadata, a bad
// name or path, absurd resources. pkg/cri answers it with InvalidArgument.
var ErrInvalid = errors.New("invalid argument")

// ErrUnsupported marks a request for a feature this engine cannot provide;
// pkg/cri answers it with Unimplemented, which clients treat as "not here".
var ErrUnsupported = errors.New("not supported")
