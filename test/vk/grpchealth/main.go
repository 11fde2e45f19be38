// Command grpchealth serves the gRPC health protocol for the vk e2e suite's
// grpc probes: SERVING while /tmp/unhealthy does not exist, NOT_SERVING
// while it does, so a test flips it from inside the container.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
)

type server struct {
	grpc_health_v1.UnimplementedHealthServer
	flag string
}

func (s *server) Check(context.Context, *grpc_health_v1.HealthCheckRequest) (*grpc_health_v1.HealthCheckResponse, error) {
	if _, err := os.Stat(s.flag); err == nil {
		return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_NOT_SERVING}, nil
	}
	return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}, nil
}

func main() {
	addr := flag.String("listen", ":9090", "address to serve on")
	unhealthy := flag.String("unhealthy-file", "/tmp/unhealthy", "NOT_SERVING while this file exists")
	flag.Parse()
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		slog.Error("listen", "err", err)
		os.Exit(1)
	}
	s := grpc.NewServer()
	grpc_health_v1.RegisterHealthServer(s, &server{flag: *unhealthy})
	slog.Info("serving grpc health", "addr", l.Addr().String())
	if err := s.Serve(l); err != nil {
		slog.Error("serve", "err", err)
		os.Exit(1)
	}
}
