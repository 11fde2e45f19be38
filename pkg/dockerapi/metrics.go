package dockerapi

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one client's Prometheus metrics: how long each engine call
// took and how it ended, and how the shared event stream fares. They are
// always counted (an observation costs well under a microsecond) and served
// only when the program registers Collectors.
type metrics struct {
	calls      *prometheus.HistogramVec
	reconnects prometheus.Counter
	eventLag   prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cri_compose_engine_request_duration_seconds",
			Help: "Duration of Docker Engine API calls by operation (as in error messages, e.g. \"create container\") " +
				"and result (ok, not_found, conflict, invalid, unavailable, forbidden, canceled, error). " +
				"Streaming calls (logs, attach, exec, stats) count until the stream is open; pull and load until the engine is done.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"operation", "result"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cri_compose_engine_event_stream_reconnects_total",
			Help: "Times the engine's event stream ended (or could not be opened) and was retried; every retry makes subscribers re-list.",
		}),
		eventLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cri_compose_engine_event_lag_seconds",
			Help:    "Time from an engine event (its timestamp, the engine's clock) to its arrival here; negative clock skew counts as 0.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
}

// Collectors are the client's metrics, for the program to register:
// cri_compose_engine_request_duration_seconds{operation,result},
// cri_compose_engine_event_stream_reconnects_total and
// cri_compose_engine_event_lag_seconds.
func (c *Client) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.m.calls, c.m.reconnects, c.m.eventLag}
}

// observe records one engine call. Methods defer it with their start time
// and the address of their error result:
//
//	defer c.observe("start container", time.Now(), &err)
func (c *Client) observe(op string, start time.Time, err *error) {
	if c.m == nil {
		return
	}
	var e error
	if err != nil {
		e = *err
	}
	c.m.calls.WithLabelValues(op, resultOf(e)).Observe(time.Since(start).Seconds())
}

// resultOf is the result label of an engine call's error.
func resultOf(err error) string {
	if err == nil {
		return "ok"
	}
	switch KindOf(err) {
	case KindNotFound:
		return "not_found"
	case KindConflict:
		return "conflict"
	case KindInvalid:
		return "invalid"
	case KindUnavailable:
		return "unavailable"
	case KindForbidden:
		return "forbidden"
	case KindCanceled:
		return "canceled"
	}
	return "error"
}

// eventSeen records the lag of one event and streamRetry a stream retry
// (both from events.go).
func (c *Client) eventSeen(t time.Time) {
	if c.m != nil && !t.IsZero() {
		c.m.eventLag.Observe(max(time.Since(t), 0).Seconds())
	}
}

func (c *Client) streamRetry() {
	if c.m != nil {
		c.m.reconnects.Inc()
	}
}
