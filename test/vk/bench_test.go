package vk_test

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cri-compose/cri-compose/test/suite"
)

var benchPods = flag.Int("bench.pods", 50, "pods per round of BenchmarkPodStartup")

// BenchmarkPodStartup: pod create → Running and Ready on the virtual node,
// as a watch sees it, for -bench.pods busybox pods created at once
// (concurrent) and one after another (sequential). The latency of a pod
// is from just before its Create call (creationTimestamp has whole
// seconds only) to the first watch event that shows it Running with
// Ready=True; p50/p99/max over every pod of every round are reported,
// and ns/op is a whole round's time (deletions excluded). Run it with
// -benchtime 1x (make bench-vk): each op is a round of pods. The virtual node
// line in BENCHMARKS.md: target p99 < 2 s, against
// Kubernetes' SLO of 5 s.
func BenchmarkPodStartup(b *testing.B) {
	prepared.Need(b)
	for _, mode := range []string{"concurrent", "sequential"} {
		b.Run(fmt.Sprintf("%s-%d", mode, *benchPods), func(b *testing.B) {
			var lat []time.Duration
			for i := range b.N {
				lat = append(lat, startupRound(b, mode, i)...)
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return lat[min(len(lat)-1, int(float64(len(lat))*p))].Seconds()
			}
			b.ReportMetric(pct(0.50), "p50-s")
			b.ReportMetric(pct(0.99), "p99-s")
			b.ReportMetric(lat[len(lat)-1].Seconds(), "max-s")
			fmt.Fprintf(os.Stderr, "virtual node %s: %d pods, create -> Running+Ready p50 %.3fs p99 %.3fs max %.3fs\n",
				mode, len(lat), pct(0.50), pct(0.99), lat[len(lat)-1].Seconds())
			printCRILatency(b)
		})
	}
}

// startupRound creates the round's pods in a namespace of its own, waits
// for all of them to be Running and Ready, and removes them (outside the
// measured time); it returns each pod's latency.
func startupRound(b *testing.B, mode string, round int) []time.Duration {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("vke2e-%s-bench-%s-%d", runID, mode, round)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer removeNamespacePods(b, ns)

	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var (
		mu      sync.Mutex
		created = map[string]time.Time{}
		ready   = map[string]time.Time{}
		changed = make(chan struct{}, 1)
	)
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			p, ok := ev.Object.(*v1.Pod)
			if !ok || p.Status.Phase != v1.PodRunning || condition(p, v1.PodReady) != v1.ConditionTrue {
				continue
			}
			now := time.Now()
			mu.Lock()
			if _, seen := ready[p.Name]; !seen {
				ready[p.Name] = now
			}
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	}()
	n := *benchPods
	waitReady := func(want int) {
		for {
			mu.Lock()
			got := len(ready)
			mu.Unlock()
			if got >= want {
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				b.Fatalf("%d of %d pods Running and Ready after 10 min\nvk-cri log:\n%s", got, want, tail(vkLog, 40))
			}
		}
	}
	create := func(i int) {
		grace := int64(1)
		name := fmt.Sprintf("p%03d", i)
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: &grace,
				Containers: []v1.Container{busybox("sleep", "trap 'exit 0' TERM; sleep 3600 & wait")}},
		}
		start := time.Now()
		if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Errorf("create pod %s: %v", name, err)
			return
		}
		mu.Lock()
		created[name] = start
		mu.Unlock()
	}
	b.StartTimer()
	switch mode {
	case "concurrent":
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { create(i) })
		}
		wg.Wait()
		waitReady(n)
	default:
		for i := range n {
			create(i)
			waitReady(i + 1)
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	lat := make([]time.Duration, 0, n)
	for name, t0 := range created {
		lat = append(lat, ready[name].Sub(t0))
	}
	if len(lat) != n {
		b.Fatalf("%d of %d pods created", len(lat), n)
	}
	return lat
}

// removeNamespacePods deletes the namespace's pods and waits until vk-cri
// has removed them from the runtime, so that rounds do not overlap.
func removeNamespacePods(b *testing.B, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Errorf("delete pods of %s: %v", ns, err)
		return
	}
	if err := suite.Poll("the pods of "+ns+" removed", 5*time.Minute, func() (bool, string) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprint(len(pods.Items), " left")
	}); err != nil {
		b.Error(err)
	}
}

// printCRILatency prints vk-cri's mean CRI call latency by method so far
// (its /metrics, vkcri_cri_request_duration_seconds): where a pod's start
// spends its time, runtime or vk-cri.
func printCRILatency(b *testing.B) {
	cert, err := tls.LoadX509KeyPair(kubeletClient[0], kubeletClient[1])
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}}} // the serving certificate is not measured here
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + kubeletAddr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	var lines []string
	for _, m := range mfs["vkcri_cri_request_duration_seconds"].GetMetric() {
		h := m.GetHistogram()
		if h.GetSampleCount() == 0 {
			continue
		}
		method := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "method" {
				method = l.GetValue()
			}
		}
		lines = append(lines, fmt.Sprintf("  %-22s %6d calls, mean %7.1f ms", method, h.GetSampleCount(), 1000*h.GetSampleSum()/float64(h.GetSampleCount())))
	}
	slices.Sort(lines)
	fmt.Fprintf(os.Stderr, "vk-cri CRI calls since it started:\n%s\n", strings.Join(lines, "\n"))
}
