package vk_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The shared vk-cri rotates at these (main_test.go passes them as flags).
const (
	rotateMaxSize  = 1 << 20
	rotateMaxFiles = 3
)

// TestLogRotation: a container writes numbered lines fast (1000 at a time,
// at most 50,000 a second) until the test has seen its log rotated five
// times. vk-cri rotates it (rename, gzip, ReopenContainerLog while the
// lines come); the files
// on disk never exceed --container-log-max-files, the oldest are removed
// and all but the newest rotated one compressed, what is kept holds every
// line from its oldest on, once and in order, ending at the last one.
func TestLogRotation(t *testing.T) {
	need(t)
	// Not beside the parallel tests, whose load slows the rotation
	// rounds. A gap in the output shows in the check below with each
	// file's span, to tell one inside a file from one between files.
	// How many lines fit between two rotation rounds is the machine's
	// pace, so the writer is not given a count: it writes until the test
	// has seen stopAfter rotations and says stop (looking for /tmp/stop once
	// every 1000 lines), then leaves its last line's number in
	// /tmp/written. maxLines bounds it should the rotations never come.
	// The pause after each 1000 lines keeps the writer below what gzip
	// compresses on a loaded machine: the CRI log grows at the writer's
	// full speed, and a rotation round compresses the file the round
	// before rotated (as kubelet's does), so a writer faster than gzip
	// makes each round's file larger than the last, and the rounds
	// minutes apart.
	const maxLines = 50000000
	// Three rotations are the least that shows the oldest files removed
	// (at most three files are kept); a few more keep the writer going
	// well past its start.
	const stopAfter = 5
	ns := namespace(t)
	zero := int64(0)
	script := fmt.Sprintf(`sleep 2; i=0
while [ ! -e /tmp/stop ] && [ $i -lt %d ]; do j=0; while [ $j -lt 1000 ]; do i=$((i+1)); j=$((j+1)); echo "line $i"; done; usleep 20000; done
echo $i > /tmp/written.tmp; mv /tmp/written.tmp /tmp/written; exec sleep 3600`, maxLines)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "chatty", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Containers: []v1.Container{busybox("c", script)}},
	})
	waitFor(t, "pod chatty Running", time.Minute, func() (bool, string) {
		p := getPod(t, ns, "chatty")
		return p.Status.Phase == v1.PodRunning, podSummary(p)
	})

	// Until the writer is done, the files on disk are looked at every
	// 200 ms. `logs -f` is not followed here: kubelet's reader (cri-client's
	// ReadLogs, which vk-cri uses) loses its place when it falls two
	// rotations behind a writer this fast, showing the live file again or
	// stopping (docs/operations.md).
	p := getPod(t, ns, "chatty")
	dir := filepath.Join(runDir, "vk-state", "logs", ns+"_chatty_"+string(pod.UID), "c")
	rotations := map[string]bool{}
	deadline := time.Now().Add(5 * time.Minute)
	stopped := false
	last := 0
	for {
		names := keptLogs(t, dir)
		if len(names) > rotateMaxFiles {
			t.Fatalf("%d log files %v, want at most %d", len(names), names, rotateMaxFiles)
		}
		for _, n := range names {
			rotations[strings.TrimSuffix(n, ".gz")] = true
		}
		if !stopped && len(rotations) >= 1+stopAfter { // the live log and the rotated ones
			execIn(t, p, "c", "touch", "/tmp/stop")
			stopped = true
		}
		if out, err := tryExec(p, "c", "cat", "/tmp/written"); err == nil {
			if last, err = strconv.Atoi(strings.TrimSpace(out)); err != nil {
				t.Fatalf("/tmp/written: %q", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the writer not done after 5 minutes (files seen %v)\nvk-cri log:\n%s",
				slices.Sorted(maps.Keys(rotations)), tail(vkLog, 20))
		}
		time.Sleep(200 * time.Millisecond) // the pace of the looks, not a wait for an outcome
	}
	if !stopped {
		t.Fatalf("log files seen %v after %d lines: fewer than %d rotations", slices.Sorted(maps.Keys(rotations)), last, stopAfter)
	}

	// The writer is done; a round may still rotate its log, so the kept
	// files are read once none will be rotated again (the live one is
	// under the size), no compression is under way (it removes the file it
	// compressed when done), two listings agree, and the runtime's log pump,
	// which may trail the writer, has written the last line.
	var kept []string
	var size int64
	waitFor(t, "the kept log files stable", 30*time.Second, func() (bool, string) {
		names := keptLogs(t, dir)
		same := slices.Equal(names, kept)
		kept = names
		tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
		live, err := os.Stat(filepath.Join(dir, "0.log"))
		end := lastLine(dir, names)
		return same && len(tmp) == 0 && err == nil && live.Size() < rotateMaxSize && end == fmt.Sprintf("line %d", last),
			fmt.Sprint(names, tmp, err, end)
	})
	var text bytes.Buffer
	var spans []string // each file's first and last line, to tell a gap between files from one inside
	for _, n := range kept {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fi, _ := f.Stat()
		size += fi.Size()
		var r io.Reader = f
		if strings.HasSuffix(n, ".gz") {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
		}
		b, err := criText(r)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			first, _, _ := strings.Cut(s, "\n")
			spans = append(spans, fmt.Sprintf("%s: %s to %s", n, first, s[strings.LastIndex(s, "\n")+1:]))
		}
		text.Write(b)
	}
	// Bounded: the oldest lines were removed with their files, and what is
	// kept is MaxFiles files at most (checked above at every look). How big
	// each is depends on how much the writer managed between two rounds,
	// which is the machine's pace, as with kubelet.
	if first, _, _ := strings.Cut(strings.TrimPrefix(text.String(), "line "), "\n"); first == "1" {
		t.Errorf("the kept files %v start at line 1: no rotated file was ever removed", kept)
	}
	if err := checkLines(&text, last, "kept files"); err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(spans, "\n"))
	}
	// Every rotated file but the newest is compressed.
	for _, n := range kept[:max(len(kept)-2, 0)] {
		if !strings.HasSuffix(n, ".gz") {
			t.Errorf("rotated file %s of %v is not compressed", n, kept)
		}
	}
	written := int64(last) * int64(len("2026-12-02T00:00:00.000000000Z stdout F line 400000\n"))
	t.Logf("%d rotations seen; %d bytes kept in %v of about %d written", len(rotations)-1, size, kept, written)
}

// lastLine is the text of the last record of the newest of names (oldest
// first, the live one last) that holds one: right after a rotation the
// live file is empty, and the newest rotated one is never compressed.
func lastLine(dir string, names []string) string {
	for i := len(names) - 1; i >= max(len(names)-2, 0); i-- {
		if strings.HasSuffix(names[i], ".gz") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, names[i]))
		if err != nil {
			return ""
		}
		text, err := criText(bytes.NewReader(b))
		if err != nil {
			return ""
		}
		if s := strings.TrimSpace(string(text)); s != "" {
			return s[strings.LastIndex(s, "\n")+1:]
		}
	}
	return ""
}

// keptLogs are the container's log files, oldest first and the live one
// last. A compression in progress is not counted twice: its temporary
// file, or the original still beside its finished .gz, is not a file kept.
func keptLogs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var rotated []string
	live := false
	for _, e := range ents {
		switch n := e.Name(); {
		case n == "0.log":
			live = true
		case strings.HasPrefix(n, "0.log.") && !strings.HasSuffix(n, ".tmp"):
			rotated = append(rotated, n)
		}
	}
	rotated = slices.DeleteFunc(rotated, func(n string) bool {
		return !strings.HasSuffix(n, ".gz") && slices.Contains(rotated, n+".gz")
	})
	slices.Sort(rotated)
	if live {
		rotated = append(rotated, "0.log")
	}
	return rotated
}

// checkLines reads "line N" lines: each N one more than the one before,
// from any first one to last.
func checkLines(r io.Reader, last int, what string) error {
	sc := bufio.NewScanner(r)
	prev := 0
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "line "))
		if err != nil {
			return fmt.Errorf("%s: line %q", what, sc.Text())
		}
		if prev != 0 && n != prev+1 {
			return fmt.Errorf("%s: line %d after line %d", what, n, prev)
		}
		prev = n
		if n == last {
			return nil
		}
	}
	return fmt.Errorf("%s: ended after line %d, want %d (%v)", what, prev, last, sc.Err())
}

// criText is the text of CRI log records ("<time> <stream> F <text>"),
// one line each.
func criText(r io.Reader) ([]byte, error) {
	sc := bufio.NewScanner(r)
	var out bytes.Buffer
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) != 4 || f[2] != "F" {
			return nil, fmt.Errorf("CRI record %q", sc.Text())
		}
		out.WriteString(f[3] + "\n")
	}
	return out.Bytes(), sc.Err()
}

// TestLogsPreviousAfterRotation: `logs --previous` of a container whose
// log was rotated before it exited reads that run's live file, as
// kubelet's: it ends with the run's last line and holds nothing of the
// next run, and its start was rotated away (not the run's first line).
func TestLogsPreviousAfterRotation(t *testing.T) {
	need(t)
	t.Parallel()
	ns := namespace(t)
	zero := int64(0)
	// The first run writes 30000 numbered lines (over 1 MiB with their CRI
	// prefix: one rotation at least), waits for the test, writes 100 more,
	// says it ends and fails; the next run says it is the next.
	script := `if [ -e /tmp/ran ]; then echo "next run"; exec sleep 12345; fi
i=0; while [ $i -lt 30000 ]; do i=$((i+1)); echo "line $i"; done
while [ ! -e /tmp/go ]; do sleep 0.2; done
while [ $i -lt 30100 ]; do i=$((i+1)); echo "line $i"; done
touch /tmp/ran; echo "end of the first run"; exit 1`
	c := busybox("c", script)
	// /tmp survives the restart only on a volume: an emptyDir.
	c.VolumeMounts = []v1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "twice", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Volumes:    []v1.Volume{{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
			Containers: []v1.Container{c}},
	})
	p := waitRunning(t, ns, pod.Name)
	dir := filepath.Join(runDir, "vk-state", "logs", ns+"_twice_"+string(pod.UID), "c")
	waitFor(t, "the first run's log rotated", time.Minute, func() (bool, string) {
		names := keptLogs(t, dir)
		return len(names) > 1, fmt.Sprint(names)
	})
	execIn(t, p, "c", "touch", "/tmp/go")
	waitFor(t, "the container restarted", time.Minute, func() (bool, string) {
		p = getPod(t, ns, pod.Name)
		cs := containerStatus(p, "c")
		return cs.RestartCount == 1 && cs.State.Running != nil, podSummary(p)
	})
	// The runtime's log pump may still be writing the first run's last
	// lines (it trails the container, up to a bound, at its exit).
	ctx := context.Background()
	var prev []byte
	var lines []string
	waitFor(t, "logs --previous up to the first run's last line", 30*time.Second, func() (bool, string) {
		var err error
		prev, err = client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "c", Previous: true}).DoRaw(ctx)
		lines = strings.Split(strings.TrimSpace(string(prev)), "\n")
		return err == nil && lines[len(lines)-1] == "end of the first run", fmt.Sprintf("%v, last line %q", err, lines[len(lines)-1])
	})
	if lines[0] == "line 1" {
		t.Errorf("logs --previous starts at line 1: the first run's rotated part is in it")
	}
	if err := checkLines(strings.NewReader(strings.Join(lines[:len(lines)-1], "\n")+"\n"), 30100, "logs --previous"); err != nil {
		t.Error(err)
	}
	if strings.Contains(string(prev), "next run") {
		t.Error("logs --previous holds the next run's output")
	}
	waitFor(t, "logs of the current run", 30*time.Second, func() (bool, string) {
		cur, err := client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Container: "c"}).DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(cur)) == "next run", fmt.Sprintf("%q %v", cur, err)
	})
}
