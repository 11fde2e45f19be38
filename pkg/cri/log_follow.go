package cri

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// followDrainWait bounds how long a follower waits, once the container has
// exited, for its log pump to write the last lines.
const followDrainWait = 5 * time.Second

// FollowLog streams a container's CRI log file (crilog.ReadLog: since,
// tail, and with follow the lines written later, across kubelet's
// rotation) to a client that cannot read the file. A follower stops once
// the container has exited (or was removed) and its pump has written all
// it had, or when the client goes away.
func (p *projectsService) FollowLog(r *cricomposev1.FollowLogRequest, stream grpc.ServerStreamingServer[cricomposev1.LogLine]) error {
	s := p.s
	c, err := s.store.Container(r.GetContainerId())
	if err != nil {
		return grpcError(fmt.Errorf("follow log: %w", err))
	}
	if c.LogPath == "" {
		return grpcError(fmt.Errorf("follow log of container %s: it has no log path (its pod has no log_directory or it no log_path): %w", c.ID, errPrecondition))
	}
	o := crilog.ReadOptions{Tail: int(min(r.GetTailLines(), 1<<30)), Follow: r.GetFollow()}
	if ns := r.GetSinceTime(); ns > 0 {
		o.Since = time.Unix(0, ns)
	}
	id := c.ID
	o.Done = func() bool {
		cur, err := s.store.Container(id)
		if err != nil {
			return true // removed
		}
		if cur.State != runtime.ContainerState_CONTAINER_EXITED {
			return false
		}
		// The store reports an exit once the pump drained (beforeExit),
		// unless that took too long: wait for it once more.
		s.pumps.drain(id, followDrainWait)
		return true
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(s.stopping, cancel)()
	err = crilog.ReadLog(ctx, c.LogPath, o, func(rec crilog.Record) error {
		return stream.Send(&cricomposev1.LogLine{
			Time: rec.Time.UnixNano(), Stream: string(rec.Stream), Partial: rec.Partial,
			Content: bytes.Clone(rec.Content), // the message may be read after Send returns

		})
	})
	if s.stopping.Err() != nil && stream.Context().Err() == nil {
		return status.Error(codes.Unavailable, "follow log: the runtime is shutting down")
	}
	if err != nil {
		return grpcError(fmt.Errorf("follow log of container %s: %w", id, err))
	}
	return nil
}
