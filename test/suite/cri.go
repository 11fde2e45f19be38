package suite

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Dial is a gRPC client of a CRI endpoint ("unix:///path"), as kubelet
// and crictl connect: no TLS on a local socket.
func Dial(endpoint string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	return grpc.NewClient(endpoint, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
}

// Ready asks Status once: RuntimeReady, or why not.
func Ready(rt runtime.RuntimeServiceClient) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := rt.Status(ctx, &runtime.StatusRequest{})
	if err != nil {
		return false, err.Error()
	}
	for _, c := range r.GetStatus().GetConditions() {
		if c.GetType() == runtime.RuntimeReady {
			return c.GetStatus(), c.GetReason() + ": " + c.GetMessage()
		}
	}
	return false, "no RuntimeReady condition"
}

// WaitReady polls Status until the runtime reports RuntimeReady: kubelet
// uses a runtime only then (cri-compose has read its pods back from the
// engine).
func WaitReady(rt runtime.RuntimeServiceClient, timeout time.Duration) error {
	return Poll("the runtime to report RuntimeReady", timeout, func() (bool, string) { return Ready(rt) })
}
