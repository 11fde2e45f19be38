package dockerapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestResultOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{wrap("inspect container", "x", cerrdefs.ErrNotFound), "not_found"},
		{fmt.Errorf("outer: %w", wrap("create container", "x", cerrdefs.ErrConflict)), "conflict"},
		{wrap("create container", "x", cerrdefs.ErrInvalidArgument), "invalid"},
		{wrap("ping engine", "x", cerrdefs.ErrUnavailable), "unavailable"},
		{wrap("pull image", "x", cerrdefs.ErrUnauthenticated), "forbidden"},
		{wrap("stop container", "x", context.DeadlineExceeded), "canceled"},
		{errors.New("boom"), "error"},
	} {
		if got := resultOf(tc.err); got != tc.want {
			t.Errorf("resultOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestObserve(t *testing.T) {
	c := &Client{m: newMetrics()}
	call := func(fail bool) (err error) {
		defer c.observe("start container", time.Now(), &err)
		if fail {
			return wrap("start container", "x", cerrdefs.ErrNotFound)
		}
		return nil
	}
	_ = call(false)
	_ = call(false)
	_ = call(true)
	c.streamRetry()
	c.eventSeen(time.Now().Add(-time.Second))
	c.eventSeen(time.Now().Add(time.Hour)) // the engine's clock ahead: lag 0
	want := `
# HELP cri_compose_engine_event_stream_reconnects_total Times the engine's event stream ended (or could not be opened) and was retried; every retry makes subscribers re-list.
# TYPE cri_compose_engine_event_stream_reconnects_total counter
cri_compose_engine_event_stream_reconnects_total 1
`
	if err := testutil.CollectAndCompare(c.m.reconnects, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c.m.calls); n != 2 {
		t.Errorf("%d series of engine calls, want 2 (ok, not_found)", n)
	}
	if got := testutil.ToFloat64(c.m.reconnects); got != 1 {
		t.Errorf("reconnects %v", got)
	}
	if n := histogramCount(t, c.m.calls.WithLabelValues("start container", "ok")); n != 2 {
		t.Errorf("start container ok: %d observations, want 2", n)
	}
	if n := histogramCount(t, c.m.calls.WithLabelValues("start container", "not_found")); n != 1 {
		t.Errorf("start container not_found: %d observations, want 1", n)
	}
	if n := histogramCount(t, c.m.eventLag); n != 2 {
		t.Errorf("event lag: %d observations, want 2", n)
	}
	if len(c.Collectors()) != 3 {
		t.Errorf("Collectors: %d", len(c.Collectors()))
	}
	// A Client made without New counts nothing and does not panic.
	var zero Client
	zero.observe("ping engine", time.Now(), nil)
	zero.streamRetry()
	zero.eventSeen(time.Now())
}

func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var out dto.Metric
	if err := o.(prometheus.Metric).Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}
