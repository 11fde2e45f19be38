package e2e

import (
	"bufio"
	"bytes"
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

	"github.com/cri-compose/cri-compose/test/images"
	"github.com/cri-compose/cri-compose/test/suite"
)

// floodBytes: 256 MiB in `make test`, where other suites load the machine
// too (128 rotations of the engine's log, about a minute); `make test-logflood`
// writes 1 GiB.
var floodBytes = flag.Int64("e2e.flood-bytes", 256<<20, "bytes TestLogFlood's container writes at full speed (0: skip it)")

var (
	logspamOnce sync.Once
	logspamRef  string
	logspamErr  error
)

// logspamImage is busybox with /bin/logspam (test/images/logspam), built
// once per run.
func logspamImage(t *testing.T) string {
	t.Helper()
	logspamOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		ref := "localhost/cri-compose/e2e-logspam:" + runID
		logspamErr = images.BusyboxWithProgram(ctx, engine, ref, "github.com/cri-compose/cri-compose/test/images/logspam", "/bin/logspam")
		if logspamErr == nil {
			logspamRef = ref
		}
	})
	if logspamErr != nil {
		t.Fatal(logspamErr)
	}
	return logspamRef
}

// TestLogFlood: a container that writes as fast as it can, more than a
// gigabyte by default in lines of three sizes (short, exactly Docker's
// 16 KiB split, and long enough to split twice) on stdout and stderr, finds
// every line in its CRI log once, in order and whole; and its last output,
// without a newline, ends the file as a P record, as containerd writes it.
func TestLogFlood(t *testing.T) {
	if *floodBytes == 0 {
		t.Skip("-e2e.flood-bytes is 0")
	}
	d := newDaemon(t, "flood")
	spam(t, d, "-bytes", strconv.FormatInt(*floodBytes, 10),
		"-sizes", "100,100,100,100,100,100,100,100,16384,40000", "-end", "END")
}

// TestLogSteady: a container that writes steadily, in bursts, finds every
// line in its CRI log once, in order and whole, written from its attach
// stream: the engine's log was never read back.
func TestLogSteady(t *testing.T) {
	d := newDaemon(t, "steady")
	spam(t, d, "-bytes", strconv.Itoa(8<<20), "-sizes", "100,100,100,3000",
		"-burst", "50", "-pause", "10ms", "-end", "END")
	noEngineLogFetch(t, d)
}

// noEngineLogFetch fails t if d's cri-compose fetched an engine log: the
// attach streams brought all its containers wrote.
func noEngineLogFetch(t *testing.T, d *daemon) {
	t.Helper()
	fams, err := d.cc.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]float64{}
	for _, m := range fams["cri_compose_log_pump_fetches_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			by[l.GetValue()] += m.GetCounter().GetValue()
		}
	}
	if by["tail"]+by["time"] != 0 {
		t.Errorf("engine log fetches: %v by the tail, %v by time alone; want none", by["tail"], by["time"])
	}
}

// TestLogLongLines: a container that writes only 16 KiB lines at full
// speed (each one a P and an F record: the engine splits it) finds every
// line in its CRI log once, in order and whole.
func TestLogLongLines(t *testing.T) {
	d := newDaemon(t, "long")
	spam(t, d, "-bytes", strconv.Itoa(16<<20), "-sizes", "16384", "-end", "END")
}

// spam runs logspam with args in a pod of d until it exits, and checks
// that its CRI log holds every line once, in order and whole, ending with
// "END" as a P record.
func spam(t *testing.T, d *daemon, args ...string) {
	t.Helper()
	ref := logspamImage(t)
	podPath := d.writeJSON("pod.json", d.podConfig(d.name))
	pod := strings.TrimSpace(d.crictl("runp", podPath))
	ctrPath := d.writeJSON("ctr.json", map[string]any{
		"metadata": map[string]any{"name": "spam"},
		"image":    map[string]any{"image": ref},
		"command":  append([]string{"/bin/logspam"}, args...),
		"log_path": "spam.log",
		"linux":    map[string]any{},
	})
	ctr := strings.TrimSpace(d.crictl("create", pod, ctrPath, podPath))
	start := time.Now()
	d.crictl("start", ctr)
	suite.Eventually(t, "the container to exit", 10*time.Minute, func() (bool, string) {
		var ci containerInspect
		d.crictlJSON(&ci, "inspect", ctr)
		return ci.Status.State == "CONTAINER_EXITED", ci.Status.State
	})
	elapsed := time.Since(start)
	logPath := filepath.Join(d.logDir, "spam.log")
	st, err := os.Stat(logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("logspam %v: CRI log %d bytes, complete %v after the start (%.0f MB/s)",
		args, st.Size(), elapsed.Round(time.Millisecond), float64(st.Size())/elapsed.Seconds()/1e6)
	if err := checkFlood(logPath, "END"); err != nil {
		t.Fatal(err)
	}
}

// TestLogLastLine: a short-lived container's last output without a newline
// reaches its CRI log, tagged P, every time, from its attach stream: the
// engine's log is not read back for a container whose stream ended with it.
func TestLogLastLine(t *testing.T) {
	d := newDaemon(t, "last")
	podPath := d.writeJSON("pod.json", d.podConfig("last"))
	pod := strings.TrimSpace(d.crictl("runp", podPath))
	for i := range 5 {
		name := fmt.Sprintf("done%d", i)
		ctrPath := d.writeJSON(name+".json", map[string]any{
			"metadata": map[string]any{"name": name},
			"image":    map[string]any{"image": localImage},
			"command":  []string{"sh", "-c", "printf DONE; exit 1"},
			"log_path": name + ".log",
			"linux":    map[string]any{},
		})
		ctr := strings.TrimSpace(d.crictl("create", pod, ctrPath, podPath))
		d.crictl("start", ctr)
		suite.Eventually(t, "the container to exit", time.Minute, func() (bool, string) {
			var ci containerInspect
			d.crictlJSON(&ci, "inspect", ctr)
			return ci.Status.State == "CONTAINER_EXITED", ci.Status.State
		})
		// Exited is reported only once the log is drained: no wait here.
		b, err := os.ReadFile(filepath.Join(d.logDir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := readCRILog(filepath.Join(d.logDir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Content != "DONE" || recs[0].Tag != "P" || recs[0].Stream != "stdout" {
			t.Fatalf("container %d: CRI log %q, want one stdout P record DONE", i, b)
		}
	}
	noEngineLogFetch(t, d)
}

// checkFlood reads a CRI log of logspam's output, joins P records into
// lines as kubelet does, and checks that each stream has lines 1..N exactly
// once, in order, whole, and that stdout ends with end, unterminated.
func checkFlood(path, end string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	next := map[string]int{"stdout": 1, "stderr": 1}
	partial := map[string][]byte{}
	var lastTag string
	var lastStream string
	var recent []string // the last records, for the error
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s; the last records (stream, tag, bytes): %s", fmt.Sprintf(format, args...), strings.Join(recent, ", "))
	}
	for rec := 1; ; rec++ {
		raw, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return fmt.Errorf("record %d: longer than 1 MiB", rec)
		}
		if len(raw) == 0 && err != nil {
			break
		}
		if err != nil {
			return fmt.Errorf("record %d: unterminated: %.80q", rec, raw)
		}
		line := raw[:len(raw)-1]
		fields := bytes.SplitN(line, []byte{' '}, 4)
		if len(fields) != 4 {
			return fmt.Errorf("record %d: not a CRI record: %.80q", rec, line)
		}
		if _, err := time.Parse(time.RFC3339Nano, string(fields[0])); err != nil {
			return fmt.Errorf("record %d: timestamp: %v", rec, err)
		}
		stream, tag, content := string(fields[1]), string(fields[2]), fields[3]
		if stream != "stdout" && stream != "stderr" {
			return fmt.Errorf("record %d: stream %q", rec, stream)
		}
		lastTag, lastStream = tag, stream
		recent = append(recent, fmt.Sprintf("%d %s %s %d", rec, stream, tag, len(content)))
		if len(recent) > 8 {
			recent = recent[1:]
		}
		partial[stream] = append(partial[stream], content...)
		switch tag {
		case "P":
			continue
		case "F":
		default:
			return fmt.Errorf("record %d: tag %q", rec, tag)
		}
		whole := partial[stream]
		partial[stream] = partial[stream][:0]
		if err := checkSpamLine(whole, next[stream]); err != nil {
			return fail("record %d (%s): %v", rec, stream, err)
		}
		next[stream]++
	}
	if got := string(partial["stdout"]); got != end || lastTag != "P" || lastStream != "stdout" {
		return fmt.Errorf("the log ends with %s %s %.80q, want stdout P %q (after %d stdout and %d stderr lines)",
			lastStream, lastTag, got, end, next["stdout"]-1, next["stderr"]-1)
	}
	if len(partial["stderr"]) != 0 {
		return fmt.Errorf("stderr ends with an unfinished line %.80q", partial["stderr"])
	}
	if next["stdout"] < 2 || next["stderr"] < 2 {
		return fmt.Errorf("only %d stdout and %d stderr lines", next["stdout"]-1, next["stderr"]-1)
	}
	return nil
}

// checkSpamLine checks that b is logspam's line seq: "<seq> <size> <fill>",
// size bytes long.
func checkSpamLine(b []byte, seq int) error {
	f := bytes.SplitN(b, []byte{' '}, 3)
	if len(f) != 3 {
		return fmt.Errorf("line %d: %.80q is not a logspam line", seq, b)
	}
	n, err1 := strconv.Atoi(string(f[0]))
	size, err2 := strconv.Atoi(string(f[1]))
	if err1 != nil || err2 != nil {
		return fmt.Errorf("line %d: %.80q is not a logspam line", seq, b)
	}
	if n != seq {
		return fmt.Errorf("line %d is missing: line %d comes instead", seq, n)
	}
	if len(b) != size {
		return fmt.Errorf("line %d: %d bytes, want %d", seq, len(b), size)
	}
	fill := byte('a' + seq%26)
	for _, c := range f[2] {
		if c != fill {
			return fmt.Errorf("line %d: damaged filler %.80q", seq, f[2])
		}
	}
	return nil
}
