package remote

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkPodStart times one pod start as kubelet makes it (RunPodSandbox,
// CreateContainer, StartContainer of a busybox container) by cri-compose on
// the same private engine, reached over its local socket, over tcp+TLS and
// over ssh, in one run; the pod is stopped and removed outside the timer.
// The ratio ssh/unix is the cost of the remote endpoint (`make
// bench-remote`). Each endpoint's cri-compose runs alone against the
// engine, in turn.
func BenchmarkPodStart(b *testing.B) {
	h := newHost(b)
	for _, c := range []struct {
		name, endpoint string
		args           []string
	}{
		{"unix", h.pe.Host(), nil},
		{"tls", h.tlsURL, []string{"--docker-cert-path", h.clientDir}},
		{"ssh", h.sshURL, sshArgs(h)},
	} {
		b.Run(c.name, func(b *testing.B) {
			k := newKube(b, h, c.endpoint, c.args...)
			k.podStart() // warm: the pause image loaded, the network made
			b.ResetTimer()
			var total time.Duration
			for range b.N {
				total += k.podStart()
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/pod")
		})
	}
}

// podStart runs one pod and returns how long the start took; the pod is
// removed outside the timer.
func (k *kube) podStart() time.Duration {
	b, _ := k.t.(*testing.B)
	nsSeq.Lock()
	nsSeq.n++
	name := "bench-" + strconv.Itoa(nsSeq.n)
	nsSeq.Unlock()
	t0 := time.Now()
	pod := k.podConfig(name)
	id := k.run(pod)
	c := k.create(id, pod, sleeper("app"))
	k.start(c)
	d := time.Since(t0)
	if b != nil {
		b.StopTimer()
	}
	k.removePod(id)
	if b != nil {
		b.StartTimer()
	}
	return d
}
