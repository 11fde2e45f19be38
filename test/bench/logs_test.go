package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/cri-compose/cri-compose/pkg/sandbox"
	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
	"github.com/cri-compose/cri-compose/test/toolcache"
)

// BenchmarkLogs measures how fast a container's output lands in its CRI log
// file through cri-compose, and what that costs in CPU, beside two anchors:
// the engine's own path, the same program in a plain container with the
// same engine log (json-file, 4 MiB x 5, as cri-compose gives app
// containers), read by a follower of the engine's log as `docker logs -f`
// reads it (any log path through the engine costs at least that); and
// containerd's CRI (a private containerd, Debian's 1.6, as kubelet would
// use it), whose shim hands the output to containerd, which writes the CRI
// log from the pipe itself (-bench.log-containerd=false leaves it out).
//
// The program (test/images/logspam) writes numbered lines on stdout and
// stderr, each stamped with its write time, and "END" last. The shapes:
// short lines at full speed, 16 KiB lines at full speed (each split by the
// engine into a P and an F record), and bursts. For each, both paths run
// one after the other (the order alternating): MB/s until END has landed,
// the latency from a line's write to its arrival (p50, p99; the file is
// read every 2 ms, the follower as it comes), and the CPU seconds per GB of
// dockerd, containerd with the shims, and cri-compose.
//
// "steady" is a container at rest that still talks: after filling its
// engine log (24 MiB at full speed), 100 lines a second; the CPU of each
// process over -bench.log-window, as % of one core.
func BenchmarkLogs(b *testing.B) {
	e := setup(b)
	p := startCRI(b, e, "logs")
	ctx := context.Background()
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	ref := "localhost/cri-compose/bench-logspam:" + runID
	var archive bytes.Buffer
	if err := images.BusyboxWithProgramArchive(bctx, &archive, ref, "github.com/cri-compose/cri-compose/test/images/logspam", "/bin/logspam"); err != nil {
		b.Fatal(err)
	}
	if err := e.d.ImageLoad(bctx, bytes.NewReader(archive.Bytes())); err != nil {
		b.Fatal(err)
	}
	atExit(func() {
		ctx, cancel := ctxTimeout(time.Minute)
		defer cancel()
		_ = e.d.ImageRemove(ctx, ref, true)
	})
	total := int64(*flagLogMiB) << 20
	shapes := []struct {
		name  string
		bytes int64
		args  []string
	}{
		{"short lines (100 B)", total, []string{"-sizes", "100"}},
		{"16 KiB lines", total, []string{"-sizes", "16384"}},
		{"bursts (2000 lines, 20 ms apart)", total / 2, []string{"-sizes", "100", "-burst", "2000", "-pause", "20ms"}},
	}
	cri := &criLogPath{label: pathCRI, rt: p.RT, ns: e.namespace, logDir: b.TempDir(), image: ref, pid: p.Proc.Pid()}
	floor := &floorLogPath{e: e, image: ref}
	attachBin := filepath.Join(b.TempDir(), "attachlog")
	if _, err := toolcache.Go(bctx, e.repoRoot, "build", "-o", attachBin, "./test/bench/attachlog"); err != nil {
		b.Fatal(err)
	}
	all := []logPath{floor, cri, &attachLogPath{e: e, image: ref, bin: attachBin, logDir: b.TempDir()},
		&attachLogPath{e: e, image: ref, bin: attachBin, logDir: b.TempDir(), engineLog: "none"},
		&attachLogPath{e: e, image: ref, bin: attachBin, logDir: b.TempDir(), engineLog: "local"}}
	if *flagLogContainerd {
		ctrd := suite.StartContainerd(b, filepath.Join(runDir, "containerd"), runID, map[string]func(*os.File) error{
			"logspam.tar": func(f *os.File) error { _, err := f.Write(archive.Bytes()); return err },
		})
		conn, err := suite.Dial("unix://" + ctrd.Sock)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		all = append(all, &criLogPath{label: pathContainerd, rt: runtime.NewRuntimeServiceClient(conn), ns: e.namespace, logDir: b.TempDir(), image: ref})
	}
	sec := &section{
		title:  fmt.Sprintf("Logs: output landing in the CRI log (cri-compose, containerd, and engine-attach: attachlog writing it from the attach stream) or read by a follower of the engine's log (engine-floor); %d MiB per full-speed shape", *flagLogMiB),
		header: []string{"shape", "path", "MB/s", "latency p50", "latency p99", "dockerd s/GB", "containerd+shims s/GB", "cri-compose or attachlog s/GB", "all s/GB"},
	}
	for i, sh := range shapes {
		args := append([]string{"-bytes", strconv.FormatInt(sh.bytes, 10), "-stamp", "-end", "END"}, sh.args...)
		// Each shape starts from another path: none always runs first
		// (a cold page cache) or last (a full engine log).
		paths := append(slices.Clone(all[i%len(all):]), all[:i%len(all)]...)
		res := map[string]logResult{}
		for _, lp := range paths {
			r, err := lp.run(ctx, fmt.Sprintf("l%d", i), args, nil)
			if err == nil && r.short && lp.name() != pathFloor {
				err = errors.New("the CRI log never got END")
			}
			if err != nil {
				b.Fatalf("%s, %s: %v", sh.name, lp.name(), err)
			}
			res[lp.name()] = r
			gb := float64(sh.bytes) / 1e9
			mbs := float64(sh.bytes) / r.elapsed.Seconds() / 1e6
			rate := fmt.Sprintf("%.1f", mbs)
			if r.short {
				rate += " (no END)"
			}
			sec.rows = append(sec.rows, []string{sh.name, lp.name(), rate,
				fms(pct(r.latencies, 50)), fms(pct(r.latencies, 99)),
				fmt.Sprintf("%.2f", r.cpu[procDockerd].Seconds()/gb), fmt.Sprintf("%.2f", r.cpu[procContainerd].Seconds()/gb),
				fmt.Sprintf("%.2f", r.cpu[procCRI].Seconds()/gb), fmt.Sprintf("%.2f", r.total().Seconds()/gb)})
			leaf(b, fmt.Sprintf("shape=%d/path=%s", i, lp.name()), metric{mbs, "MB/s"}, metric{r.total().Seconds() / gb, "cpu-s/GB"},
				metric{ms(pct(r.latencies, 99)), "p99-ms"})
		}
		c, f := res[pathCRI], res[pathFloor]
		addRatio("logs, %s: cri-compose lands %.2fx the MB/s of the engine's own path, at %.2fx its CPU per GB (latency p99 %s vs %s)",
			sh.name, f.elapsed.Seconds()/c.elapsed.Seconds(), c.total().Seconds()/f.total().Seconds(), fms(pct(c.latencies, 99)), fms(pct(f.latencies, 99)))
		if k, ok := res[pathContainerd]; ok {
			for _, path := range []string{pathCRI, pathAttach, pathAttachNoLog, pathAttachLocal} {
				c := res[path]
				addRatio("logs, %s: %s lands %.2fx the MB/s of containerd's CRI, at %.2fx its CPU per GB (latency p99 %s vs %s)",
					sh.name, path, k.elapsed.Seconds()/c.elapsed.Seconds(), c.total().Seconds()/k.total().Seconds(), fms(pct(c.latencies, 99)), fms(pct(k.latencies, 99)))
			}
		}
	}

	// At rest, talking: 100 lines a second after a full engine log.
	steady := []string{"-bytes", strconv.Itoa(1 << 30), "-fill", strconv.Itoa(24 << 20), "-stamp", "-sizes", "100", "-burst", "10", "-pause", "100ms"}
	window := *flagLogWindow
	cpus := map[string]logResult{}
	for _, lp := range all {
		r, err := lp.run(ctx, "steady", steady, &window)
		if err != nil {
			b.Fatalf("steady, %s: %v", lp.name(), err)
		}
		cpus[lp.name()] = r
		pc := func(d time.Duration) string { return fmt.Sprintf("%.1f%%", 100*d.Seconds()/window.Seconds()) }
		sec.rows = append(sec.rows, []string{"steady: 100 lines/s after 24 MiB, % of a core", lp.name(), "", fms(pct(r.latencies, 50)), fms(pct(r.latencies, 99)),
			pc(r.cpu[procDockerd]), pc(r.cpu[procContainerd]), pc(r.cpu[procCRI]), pc(r.total())})
		leaf(b, "shape=steady/path="+lp.name(), metric{100 * r.total().Seconds() / window.Seconds(), "cpu-%"})
	}
	addRatio("logs, steady (100 lines/s after a full engine log): cri-compose's path costs %.2fx the CPU of the engine's own (%s vs %s of CPU in %v)",
		cpus[pathCRI].total().Seconds()/cpus[pathFloor].total().Seconds(), cpus[pathCRI].total().Round(10*time.Millisecond), cpus[pathFloor].total().Round(10*time.Millisecond), window)
	if k, ok := cpus[pathContainerd]; ok {
		for _, path := range []string{pathCRI, pathAttach, pathAttachNoLog, pathAttachLocal} {
			addRatio("logs, steady (100 lines/s after a full engine log): %s's path costs %.2fx the CPU of containerd's CRI (%s vs %s of CPU in %v)",
				path, cpus[path].total().Seconds()/k.total().Seconds(), cpus[path].total().Round(10*time.Millisecond), k.total().Round(10*time.Millisecond), window)
		}
	}
	sec.notes = append(sec.notes, "latency: from the write (the stamp in the line) to the line's arrival in the file (read every 2 ms) or at the follower",
		"s/GB: CPU seconds (user+system) per GB written; containerd+shims: every containerd (the engine's, and on the containerd path the private one) and every containerd-shim process",
		"containerd: Debian's containerd with its CRI plugin, run privately with its own root, socket and CNI bridge; its shim passes the container's output to containerd, which writes the CRI log",
		"engine-attach: a plain container with the same engine log, and test/bench/attachlog (a process of its own, its CPU in the cri-compose column) writing the CRI log from the container's attach stream, attached before the start, as cri-compose does, without a CRI server around it",
		"attach-nolog: the same from a container without an engine log (log driver none): what the engine's attach stream delivers alone, and what its own log costs beside it",
		"attach-local: the same from a container whose engine log is the local driver's (protobuf, no JSON; its defaults)",
		"(no END): the engine's follow stream ended without the last output: Docker 20.10's follow of a json-file log can lose entries at a rotation; the time is until it ended")
	addSection(sec)
}

// The processes whose CPU BenchmarkLogs reports.
const (
	procDockerd    = "dockerd"
	procContainerd = "containerd+shims"
	procCRI        = "cri-compose"
)

type logResult struct {
	elapsed   time.Duration            // start to END read (full-speed shapes)
	latencies []time.Duration          // write to arrival, of every stamped line
	cpu       map[string]time.Duration // by proc*
	short     bool                     // the reader's stream ended before END
}

func (r logResult) total() time.Duration {
	var t time.Duration
	for _, d := range r.cpu {
		t += d
	}
	return t
}

type logPath interface {
	name() string
	// run runs logspam with args until END arrives, or, with a window,
	// until it writes steadily and then for the window.
	run(ctx context.Context, tag string, args []string, window *time.Duration) (logResult, error)
}

// procCPU is the CPU time of the processes BenchmarkLogs watches, by pid.
func procCPU(criPid int) map[int]string {
	pids := map[int]string{}
	if pid := pidOf("dockerd"); pid > 0 {
		pids[pid] = procDockerd
	}
	for _, pid := range pidsOf(func(c string) bool { return c == "containerd" || strings.HasPrefix(c, "containerd-shim") }) {
		pids[pid] = procContainerd
	}
	if criPid > 0 {
		pids[criPid] = procCRI
	}
	return pids
}

// cpuSpan measures the CPU the watched processes use from now until done
// is called. Processes that start meanwhile (the container's shim) count
// from zero.
func cpuSpan(criPid int) (done func() map[string]time.Duration) {
	start := map[int]time.Duration{}
	for pid := range procCPU(criPid) {
		start[pid], _ = cpuTime(pid)
	}
	return func() map[string]time.Duration {
		by := map[string]time.Duration{procDockerd: 0, procContainerd: 0, procCRI: 0}
		for pid, what := range procCPU(criPid) {
			if t, err := cpuTime(pid); err == nil {
				by[what] += t - start[pid]
			}
		}
		return by
	}
}

// lineLatency parses a line's content as logspam writes it with -stamp
// ("<seq> <size> <ns> <filler>") and returns the time since its write; ok
// is false for a piece that does not start a line.
func lineLatency(content []byte, at time.Time) (time.Duration, bool) {
	f := bytes.SplitN(content, []byte{' '}, 4)
	if len(f) < 4 {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return 0, false
	}
	return at.Sub(time.Unix(0, ns)), true
}

// --- cri-compose or containerd: the CRI log file

type criLogPath struct {
	label  string // pathCRI or pathContainerd
	rt     runtime.RuntimeServiceClient
	ns     string
	logDir string
	image  string
	pid    int // cri-compose's (0: another runtime)
}

func (p *criLogPath) name() string { return p.label }

func (p *criLogPath) run(ctx context.Context, tag string, args []string, window *time.Duration) (logResult, error) {
	pc := podConfig(p.ns, tag, p.logDir)
	sb, err := p.rt.RunPodSandbox(ctx, &runtime.RunPodSandboxRequest{Config: pc})
	if err != nil {
		return logResult{}, fmt.Errorf("RunPodSandbox: %w", err)
	}
	defer (&criPath{rt: p.rt}).remove(sb.PodSandboxId)
	cfg := &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: "spam"}, Image: &runtime.ImageSpec{Image: p.image},
		Command: append([]string{"/bin/logspam"}, args...), LogPath: "spam.log", Linux: &runtime.LinuxContainerConfig{}}
	ct, err := p.rt.CreateContainer(ctx, &runtime.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc, Config: cfg})
	if err != nil {
		return logResult{}, fmt.Errorf("CreateContainer: %w", err)
	}
	path := filepath.Join(pc.LogDirectory, "spam.log")
	if err := os.MkdirAll(pc.LogDirectory, 0o755); err != nil {
		return logResult{}, err
	}
	return readCRILog(path, p.pid, window, func() error {
		_, err := p.rt.StartContainer(ctx, &runtime.StartContainerRequest{ContainerId: ct.ContainerId})
		if err != nil {
			return fmt.Errorf("StartContainer: %w", err)
		}
		return nil
	})
}

// readCRILog starts the container (start) and reads the CRI log file at
// path as it grows until END, or for the window (arrivals.await), measuring
// the CPU of the watched processes with the writer's (pid: cri-compose or
// attachlog; 0: none of ours).
func readCRILog(path string, pid int, window *time.Duration, start func() error) (logResult, error) {
	r := &arrivals{}
	stop := make(chan struct{})
	tailed := make(chan error, 1)
	go func() { tailed <- tailCRILog(path, r, stop) }()
	done := cpuSpan(pid)
	at := time.Now()
	if err := start(); err != nil {
		close(stop)
		return logResult{}, err
	}
	return r.await(at, window, done, func() func() map[string]time.Duration { return cpuSpan(pid) }, stop, tailed)
}

// tailCRILog reads a CRI log file as it grows, every 2 ms, until END or
// stop.
func tailCRILog(path string, r *arrivals, stop <-chan struct{}) error {
	var f *os.File
	for f == nil {
		select {
		case <-stop:
			return nil
		case <-time.After(2 * time.Millisecond):
		}
		f, _ = os.Open(path)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var part []byte
	for {
		line, err := br.ReadSlice('\n')
		part = append(part, line...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == nil {
			// "<time> <stream> <P|F> <content>"
			if fs := bytes.SplitN(part[:len(part)-1], []byte{' '}, 4); len(fs) == 4 {
				if r.add(fs[3], time.Now()) {
					return nil
				}
			}
			part = part[:0]
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		// The rest of a record not written yet: keep it, and read on.
		select {
		case <-stop:
			return nil
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// appEngineLog is the engine log cri-compose gives app containers.
var appEngineLog = container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "4m", "max-file": "5"}}

// plainLogspam creates logspam with args in a plain container with engine
// log lc, labelled for the run's sweep; attach: its output also goes to an
// attach stream made before the start.
func plainLogspam(ctx context.Context, e *benchEnv, name, image string, args []string, attach bool, lc container.LogConfig) (id string, remove func(), err error) {
	id, err = e.d.ContainerCreate(ctx, name,
		&container.Config{Image: image, Cmd: append([]string{"/bin/logspam"}, args...), AttachStdout: attach, AttachStderr: attach,
			Labels: map[string]string{sandbox.LabelPodNamespace: e.namespace}},
		&container.HostConfig{NetworkMode: "none", LogConfig: lc}, nil)
	if err != nil {
		return "", nil, err
	}
	return id, func() {
		ctx, cancel := ctxTimeout(time.Minute)
		defer cancel()
		_ = e.d.ContainerRemove(ctx, id)
	}, nil
}

// --- the engine's attach stream, written as a CRI log (attachlog)

// attachLogPath runs the program in a plain container with the same engine
// log, and test/bench/attachlog beside it, a process of its own, writing
// the CRI log from the container's attach stream: the floor of a CRI log
// written from the attach stream.
type attachLogPath struct {
	e         *benchEnv
	image     string
	bin       string // attachlog
	logDir    string
	engineLog string // the container's log driver: "" cri-compose's json-file, "none" (pathAttachNoLog), "local" (pathAttachLocal)
}

func (p *attachLogPath) name() string {
	switch p.engineLog {
	case "none":
		return pathAttachNoLog
	case "local":
		return pathAttachLocal
	}
	return pathAttach
}

func (p *attachLogPath) run(ctx context.Context, tag string, args []string, window *time.Duration) (logResult, error) {
	lc := appEngineLog
	if p.engineLog != "" {
		lc = container.LogConfig{Type: p.engineLog}
	}
	id, remove, err := plainLogspam(ctx, p.e, fmt.Sprintf("ccb-%s-%s-%s", runID, p.name(), tag), p.image, args, true, lc)
	if err != nil {
		return logResult{}, err
	}
	defer remove()
	path := filepath.Join(p.logDir, tag+".log")
	cmd := exec.CommandContext(ctx, p.bin, "-container", id, "-log", path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return logResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return logResult{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "attached\n" {
		return logResult{}, fmt.Errorf("attachlog: %q, %v", line, err)
	}
	return readCRILog(path, cmd.Process.Pid, window, func() error { return p.e.d.ContainerStart(ctx, id) })
}

// --- the engine's own path: a follower of a plain container's engine log

type floorLogPath struct {
	e     *benchEnv
	image string
}

func (p *floorLogPath) name() string { return pathFloor }

func (p *floorLogPath) run(ctx context.Context, tag string, args []string, window *time.Duration) (logResult, error) {
	id, remove, err := plainLogspam(ctx, p.e, fmt.Sprintf("ccb-%s-logs-%s", runID, tag), p.image, args, false, appEngineLog)
	if err != nil {
		return logResult{}, err
	}
	defer remove()
	r := &arrivals{}
	stop := make(chan struct{})
	done := cpuSpan(0)
	start := time.Now()
	if err := p.e.d.ContainerStart(ctx, id); err != nil {
		return logResult{}, err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := p.e.d.ContainerLogs(fctx, id, time.Time{}, true)
	if err != nil {
		return logResult{}, err
	}
	tailed := make(chan error, 1)
	go func() {
		defer rc.Close()
		tailed <- followFrames(rc, r)
	}()
	go func() { <-stop; cancel() }()
	return r.await(start, window, done, func() func() map[string]time.Duration { return cpuSpan(0) }, stop, tailed)
}

// followFrames reads the engine's multiplexed log stream until END.
func followFrames(rd io.Reader, r *arrivals) error {
	br := bufio.NewReaderSize(rd, 1<<20)
	var hdr [8]byte
	buf := make([]byte, 64<<10)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return nil // the follow ended (cancelled, or the container gone)
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		if n > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return nil
		}
		// "<time> <content>"
		if _, content, ok := bytes.Cut(buf[:n], []byte{' '}); ok && r.add(bytes.TrimSuffix(content, []byte{'\n'}), time.Now()) {
			return nil
		}
	}
}

// arrivals collects what a reader saw: the latency of each stamped line,
// and whether END came.
type arrivals struct {
	mu        sync.Mutex
	latencies []time.Duration
	ended     bool
}

// add records one record's content; true once it is END.
func (a *arrivals) add(content []byte, at time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if string(content) == "END" {
		a.ended = true
		return true
	}
	if d, ok := lineLatency(content, at); ok {
		a.latencies = append(a.latencies, d)
	}
	return false
}

// await waits for the reader: until END (no window; done ends the CPU
// measurement begun before the start), or until the writer's bursts have
// begun (the arrivals' latency falls under a second) and then for the
// window, measuring the CPU over the window alone (a span from meter).
func (a *arrivals) await(start time.Time, window *time.Duration, done func() map[string]time.Duration, meter func() func() map[string]time.Duration, stop chan struct{}, read <-chan error) (logResult, error) {
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()
	deadline := time.After(10 * time.Minute)
	if window == nil {
		select {
		case err := <-read:
			cpu := done()
			a.mu.Lock()
			defer a.mu.Unlock()
			if err != nil {
				return logResult{}, fmt.Errorf("the reader stopped before END: %v", err)
			}
			return logResult{elapsed: time.Since(start), latencies: a.latencies, cpu: cpu, short: !a.ended}, nil
		case <-deadline:
			return logResult{}, errors.New("no END after 10 minutes")
		}
	}
	// Steady: the fill is in once 2 s of arrivals came within a second of
	// their writes.
	settled := 0
	for settled < 20 {
		select {
		case err := <-read:
			return logResult{}, fmt.Errorf("the reader stopped: %v", err)
		case <-deadline:
			return logResult{}, errors.New("the writer never settled to its bursts in 10 minutes")
		case <-time.After(100 * time.Millisecond):
		}
		a.mu.Lock()
		if n := len(a.latencies); n > 0 && a.latencies[n-1] < time.Second {
			settled++
		} else {
			settled = 0
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	from := len(a.latencies)
	a.mu.Unlock()
	done = meter()
	time.Sleep(*window) // the measurement itself
	cpu := done()
	a.mu.Lock()
	defer a.mu.Unlock()
	return logResult{latencies: slices.Clone(a.latencies[from:]), cpu: cpu}, nil
}
