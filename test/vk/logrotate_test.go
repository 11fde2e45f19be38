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
	rotateMaxFiles = 3
)

// TestLogRotation: a container writes numbered lines as fast as it can,
// about 40 times the rotation size. vk-cri rotates its log through several
// rotations (rename, gzip, ReopenContainerLog at full speed); the files
// on disk never exceed --container-log-max-files, the oldest are removed
// and all but the newest rotated one compressed, what is kept holds every
// line from its oldest on, once and in order, ending at the last one, and
// `logs --tail` reads the live file's end.
func TestLogRotation(t *testing.T) {
	need(t)
	t.Parallel()
	const last = 800000
	ns := namespace(t)
	zero := int64(0)
	pod := createPod(t, &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "chatty", Namespace: ns},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: &zero, AutomountServiceAccountToken: new(bool),
			Containers: []v1.Container{busybox("c", fmt.Sprintf(`sleep 2; i=0; while [ $i -lt %d ]; do i=$((i+1)); echo "line $i"; done; sleep 3600`, last))}},
	})
	waitFor(t, "pod chatty Running", time.Minute, func() (bool, string) {
		p := getPod(t, ns, "chatty")
		return p.Status.Phase == v1.PodRunning, podSummary(p)
	})

	// Until the writer is done (the live log ends at the last line), the
	// files on disk are looked at every 200 ms. `logs -f` is not followed
	// here: kubelet's reader (cri-client's ReadLogs, which vk-cri uses)
	// loses its place when it falls two rotations behind a writer this fast,
	// showing the live file again or stopping (docs/operations.md).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	one := int64(1)
	dir := filepath.Join(runDir, "vk-state", "logs", ns+"_chatty_"+string(pod.UID), "c")
	rotations := map[string]bool{}
	for {
		names := keptLogs(t, dir)
		if len(names) > rotateMaxFiles {
			t.Fatalf("%d log files %v, want at most %d", len(names), names, rotateMaxFiles)
		}
		for _, n := range names {
			rotations[strings.TrimSuffix(n, ".gz")] = true
		}
		b, err := client.CoreV1().Pods(ns).GetLogs("chatty", &v1.PodLogOptions{Container: "c", TailLines: &one}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs --tail=1: %v", err)
		}
		if strings.TrimSpace(string(b)) == fmt.Sprintf("line %d", last) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the writer not done after 5 minutes: last line %q\nvk-cri log:\n%s", b, tail(vkLog, 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
	if len(rotations) < 4 { // the live log and at least three rotated ones
		t.Fatalf("log files seen %v: fewer than three rotations", slices.Sorted(maps.Keys(rotations)))
	}

	// The writer is done; a round may still rotate its log, so the kept
	// files are read once two listings agree.
	var kept []string
	var size int64
	waitFor(t, "the kept log files stable", 30*time.Second, func() (bool, string) {
		names := keptLogs(t, dir)
		same := slices.Equal(names, kept)
		kept = names
		return same && len(names) > 0, fmt.Sprint(names)
	})
	var text bytes.Buffer
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
		t.Fatal(err)
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
