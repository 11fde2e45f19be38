package vk_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cri-compose/cri-compose/test/suite"
)

var (
	restPods   = flag.Int("bench.rest-pods", 110, "pods of BenchmarkNodeAtRest (kubelet's default max-pods)")
	restWindow = flag.Duration("bench.rest-window", 5*time.Minute, "how long BenchmarkNodeAtRest measures the full node at rest")
	restSettle = flag.Duration("bench.rest-settle", 20*time.Second, "how long BenchmarkNodeAtRest lets the node settle after its last pod is Ready, before measuring")
)

// probePeriod is kubelet's default probe period, and the one the issue of
// a full node asks for.
const probePeriod = 10

// BenchmarkNodeAtRest: a full node at rest. -bench.rest-pods busybox pods
// on the node (vk-cri, or kubelet under VK_NODE=kubelet), each with an
// exec readiness and an exec liveness probe every 10 s, all Running and
// Ready; then, for -bench.rest-window, the CPU (% of one core) of the
// node, its cri-compose, dockerd, containerd and the containerd shims
// (with what they reaped: runc and the probes' commands), the whole
// machine's, and the API server's requests per second (watches aside,
// the API server's own included). It runs after BenchmarkPodStartup (this
// file's name sorts after bench_test.go), whose latencies its 220
// containers and their removal would disturb.
func BenchmarkNodeAtRest(b *testing.B) {
	prepared.Need(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("vke2e-%s-rest", runID)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	defer removeNamespacePods(b, ns)

	probe := func() *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}},
			PeriodSeconds: probePeriod, TimeoutSeconds: 5, FailureThreshold: 3}
	}
	n := *restPods
	sem := make(chan struct{}, 10) // the API server and the engine take them in turn anyway
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			grace := int64(1)
			c := busybox("sleep", "trap 'exit 0' TERM; sleep 86400 & wait")
			c.ReadinessProbe, c.LivenessProbe = probe(), probe()
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", i), Namespace: ns},
				Spec: v1.PodSpec{NodeName: nodeName, TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{c}}}
			if _, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				b.Errorf("create %s: %v", pod.Name, err)
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	count := func() (ready, restarts int, err error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, 0, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Status.Phase == v1.PodRunning && condition(p, v1.PodReady) == v1.ConditionTrue {
				ready++
			}
			for _, c := range p.Status.ContainerStatuses {
				restarts += int(c.RestartCount)
			}
		}
		return ready, restarts, nil
	}
	if err := suite.Poll(fmt.Sprintf("%d pods Running and Ready", n), 20*time.Minute, func() (bool, string) {
		ready, _, err := count()
		if err != nil {
			return false, err.Error()
		}
		return ready == n, fmt.Sprint(ready, " ready")
	}); err != nil {
		b.Fatalf("%v\n%s log:\n%s", err, nodeKind(), tail(vkLog, 40))
	}
	_, restartsBefore, _ := count()
	select { // the start-up's last status updates and first probes
	case <-time.After(*restSettle):
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}

	b.ResetTimer()
	apiBefore, err := apiRequests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if *benchProfile != "" {
		wg.Go(func() {
			path := filepath.Join(*benchProfile, fmt.Sprintf("%s-rest-%d.profile.pprof", nodeKind(), n))
			if err := saveProfile(ctx, "profile", *restWindow, path); err != nil {
				fmt.Fprintf(os.Stderr, "profile: %v\n", err)
			}
		})
	}
	meter := newRestMeter(nodeProc.Pid(), criProc.Pid())
	select {
	case <-time.After(*restWindow):
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	use := meter.percent()
	apiAfter, err := apiRequests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	b.StopTimer()
	ready, restartsAfter, err := count()
	if err != nil {
		b.Fatal(err)
	}
	if ready != n || restartsAfter != restartsBefore {
		// Probes that time out on an overloaded machine restart
		// containers: the window was not at rest.
		b.Errorf("after the window: %d of %d pods ready, %d restarts during it", ready, n, restartsAfter-restartsBefore)
	}
	qps := apiAfter.since(apiBefore).total() / restWindow.Seconds()
	var parts []string
	for _, k := range restProcs {
		b.ReportMetric(use[k], k+"-%core")
		parts = append(parts, fmt.Sprintf("%s %.2f%%", k, use[k]))
	}
	b.ReportMetric(use[restStack], "stack-%core")
	b.ReportMetric(qps, "api-qps")
	fmt.Fprintf(os.Stderr, "node %s at rest, %d pods with exec readiness and liveness probes every %d s, %v: %s; node+runtime+engine %.2f%% of one core; machine %.2f%%; API server %.2f requests/s (watches aside)\n",
		nodeKind(), n, probePeriod, *restWindow, strings.Join(parts, ", "), use[restStack], use[restMachine], qps)
	apiAfter.print(os.Stderr, apiBefore, "in the window at rest")
}

// What BenchmarkNodeAtRest measures, by name.
const (
	restNode       = "node"
	restCRI        = "cri-compose"
	restDockerd    = "dockerd"
	restContainerd = "containerd"
	restShims      = "shims"
	restStack      = "stack"   // the five above
	restMachine    = "machine" // every CPU's busy time, of one core's
)

var restProcs = []string{restNode, restCRI, restDockerd, restContainerd, restShims}

// restMeter measures the CPU of the node's stack over a window: each
// process's own and what it reaped (a shim's runc and exec'd commands),
// and the machine's busy time from /proc/stat.
type restMeter struct {
	pids    map[int]string
	start   map[int]time.Duration
	machine time.Duration
	at      time.Time
}

func newRestMeter(nodePid, criPid int) *restMeter {
	m := &restMeter{pids: map[int]string{nodePid: restNode, criPid: restCRI, suite.PidOf("dockerd"): restDockerd,
		suite.PidOf("containerd"): restContainerd}, start: map[int]time.Duration{}, at: time.Now()}
	for _, pid := range suite.PidsOf(func(c string) bool { return strings.HasPrefix(c, "containerd-shim") }) {
		m.pids[pid] = restShims
	}
	for pid := range m.pids {
		self, reaped, _ := suite.CPUTime(pid)
		m.start[pid] = self + reaped
	}
	m.machine = machineBusy()
	return m
}

// percent is the CPU used since the start, in % of one core, by name;
// processes that ended meanwhile (a restarted shim) count no more.
func (m *restMeter) percent() map[string]float64 {
	wall := float64(time.Since(m.at))
	out := map[string]float64{}
	for pid, name := range m.pids {
		self, reaped, err := suite.CPUTime(pid)
		if err != nil {
			continue
		}
		pc := float64(self+reaped-m.start[pid]) / wall * 100
		out[name] += pc
		out[restStack] += pc
	}
	out[restMachine] = float64(machineBusy()-m.machine) / wall * 100
	return out
}

// machineBusy is the time every CPU spent other than idle or waiting for
// I/O (/proc/stat's first line).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var busy uint64
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		switch i {
		case 3, 4: // idle, iowait
		case 8, 9: // guest and guest_nice, counted in user and nice already
		default:
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}
