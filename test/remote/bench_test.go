package remote

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkPodStart times one pod start as kubelet makes it (RunPodSandbox,
// CreateContainer, StartContainer of a busybox container) by cri-compose on
// the same private engine, reached over its local socket, over tcp+TLS and
// over ssh, in one run: three cri-compose processes, used in turn for each
// pod, so that the machine's load weighs on the three alike. The pod is
// stopped and removed outside the timer. It reports each endpoint's mean
// (ms/pod) and the ratios to the socket: the cost of a remote endpoint
// (`make bench-remote`).
func BenchmarkPodStart(b *testing.B) {
	h := newHost(b)
	endpoints := []struct {
		name, endpoint string
		args           []string
	}{
		{"unix", h.pe.Host(), nil},
		{"tls", h.tlsURL, []string{"--docker-cert-path", h.clientDir}},
		{"ssh", h.sshURL, sshArgs(h)},
	}
	kubes := make([]*kube, len(endpoints))
	for i, e := range endpoints {
		kubes[i] = newKube(b, h, e.endpoint, e.args...)
		kubes[i].podStart() // warm: the pause image loaded, the network made
	}
	total := make([]time.Duration, len(endpoints))
	b.ResetTimer()
	for range b.N {
		for i, k := range kubes {
			total[i] += k.podStart()
		}
	}
	b.StopTimer()
	for i, e := range endpoints {
		b.ReportMetric(float64(total[i].Microseconds())/1000/float64(b.N), e.name+"-ms/pod")
		if i > 0 {
			b.ReportMetric(float64(total[i])/float64(total[0]), e.name+"/unix")
		}
	}
}

// podStart runs one pod and returns how long the start took; the pod is
// removed outside the timer.
func (k *kube) podStart() time.Duration {
	b, _ := k.t.(*testing.B)
	// k.t is the benchmark: stop its timer around the removal.
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
		defer b.StartTimer()
	}
	k.removePod(id)
	return d
}
