package cri

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/cri-compose/cri-compose/pkg/dockerapi"
	"github.com/cri-compose/cri-compose/pkg/pause"
)

// portForwardEngine connects one forwarded connection to port of the pod
// through the engine, for an engine on another host, where the
// pod network cannot be dialled from here: an exec of the pause binary's
// relay mode ("/pause -forward PORT") in the infra container, which shares
// the pod's network namespace, carries the bytes over the exec's stdin
// and stdout. It needs the built-in pause image (--pod-infra-image
// replaces the binary).
func (r streamRuntime) portForwardEngine(ctx context.Context, sb sandboxRec, port int32, stream io.ReadWriteCloser) error {
	d := r.s.docker
	execID, err := d.ExecCreate(ctx, sb.ID, dockerapi.ExecConfig{
		Cmd: []string{pause.Path, "-forward", strconv.Itoa(int(port))}, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return fmt.Errorf("port-forward to pod sandbox %s through the engine: %w", sb.ID, err)
	}
	st, err := d.ExecAttach(ctx, execID, false)
	if err != nil {
		return fmt.Errorf("port-forward to pod sandbox %s through the engine: %w", sb.ID, err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Close() })
	defer stop()

	// Client to pod: the client's EOF half-closes the exec's stdin, which
	// the relay passes on; the answer still flows back.
	go func() {
		_, err := io.Copy(st.Conn, stream)
		if cw, ok := st.Conn.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
			return
		}
		st.Close()
	}()
	var stderr bytes.Buffer
	_, err = stdcopy.StdCopy(stream, &stderr, st.Reader)
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		// The relay could not connect: nothing listens on the port.
		return fmt.Errorf("port-forward to port %d in pod sandbox %s: %s", port, sb.ID, msg)
	}
	return err
}
