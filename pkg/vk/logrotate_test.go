package vk

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	testingclock "k8s.io/utils/clock/testing"
)

// reopenRuntime is a runtime whose ReopenContainerLog makes the log file
// anew, as a runtime's log writer does, or fails.
type reopenRuntime struct {
	internalapi.RuntimeService
	path string
	fail error
	n    int
}

func (r *reopenRuntime) ReopenContainerLog(context.Context, string) error {
	r.n++
	if r.fail != nil {
		return r.fail
	}
	return os.WriteFile(r.path, nil, 0o600)
}

// logFiles is what the log's directory holds: name → content, gunzipped.
func logFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = f
		if strings.HasSuffix(e.Name(), gzSuffix) {
			if r, err = gzip.NewReader(f); err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
		}
		b, err := io.ReadAll(r)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func TestRotateLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "0.log")
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(t0)
	rt := &reopenRuntime{path: path}
	p := &Provider{rt: &Runtime{RuntimeService: rt}, clock: clk}
	r := &logRotator{p: p, policy: LogRotation{MaxSize: 1, MaxFiles: 3, MaxWorkers: 1, MonitorInterval: time.Minute}}
	ctx := context.Background()
	name := func(d time.Duration) string { return "0.log." + t0.Add(d).Format(rotatedTimeFormat) }
	write := func(s string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	check := func(want map[string]string) {
		t.Helper()
		got := logFiles(t, dir)
		if len(got) != len(want) {
			t.Fatalf("files %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("files %v, want %v", got, want)
			}
		}
	}

	// Each rotation renames the live log; the one before it is gzipped;
	// beyond MaxFiles (the live one counted) the oldest goes.
	for i, s := range []string{"one\n", "two\n", "three\n"} {
		write(s)
		if err := r.rotate(ctx, "c", path); err != nil {
			t.Fatalf("rotation %d: %v", i+1, err)
		}
		clk.Step(time.Second)
	}
	check(map[string]string{"0.log": "", name(time.Second) + gzSuffix: "two\n", name(2 * time.Second): "three\n"})
	if rt.n != 3 {
		t.Errorf("%d reopens, want 3", rt.n)
	}

	// Twice in one second: the name is taken, so the live log stays.
	write("four\n")
	clk.SetTime(t0.Add(2 * time.Second))
	if err := r.rotate(ctx, "c", path); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Fatalf("second rotation within a second: %v, want an error saying the name is taken", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "four\n" {
		t.Fatalf("live log %q after a refused rotation, want it kept", b)
	}

	// A failed reopen puts the log back where the runtime writes.
	clk.SetTime(t0.Add(10 * time.Second))
	rt.fail = errors.New("not running")
	if err := r.rotate(ctx, "c", path); err == nil {
		t.Fatal("rotation with a failing reopen: no error")
	}
	if b, _ := os.ReadFile(path); string(b) != "four\n" {
		t.Fatalf("live log %q after a failed reopen, want it renamed back", b)
	}
	if _, err := os.Stat(filepath.Join(dir, name(10*time.Second))); !os.IsNotExist(err) {
		t.Errorf("rotated name left after a failed reopen: %v", err)
	}
	rt.fail = nil

	// What an interrupted compression leaves is removed.
	tmp := filepath.Join(dir, name(2*time.Second)+gzSuffix+tmpSuffix)
	dup := filepath.Join(dir, name(time.Second))
	for _, f := range []string{tmp, dup} {
		if err := os.WriteFile(f, []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.rotate(ctx, "c", path); err != nil {
		t.Fatal(err)
	}
	check(map[string]string{"0.log": "", name(2*time.Second) + gzSuffix: "three\n", name(10 * time.Second): "four\n"})

	// Removing the container removes its log and every rotated file.
	other := filepath.Join(dir, "1.log")
	if err := os.WriteFile(other, []byte("next attempt"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.removeContainerLogs(dir, "0.log")
	check(map[string]string{"1.log": "next attempt"})
}

func TestLogRotationValidate(t *testing.T) {
	if err := DefaultLogRotation.Validate(); err != nil {
		t.Errorf("kubelet's defaults: %v", err)
	}
	if err := (LogRotation{}).Validate(); err != nil {
		t.Errorf("off: %v", err)
	}
	for _, tc := range []struct {
		r    LogRotation
		want string
	}{
		{LogRotation{MaxSize: -1}, "negative"},
		{LogRotation{MaxSize: 1, MaxFiles: 1, MaxWorkers: 1, MonitorInterval: 10 * time.Second}, "max files 1 must be greater than 1"},
		{LogRotation{MaxSize: 1, MaxFiles: 2, MaxWorkers: 0, MonitorInterval: 10 * time.Second}, "max workers 0"},
		{LogRotation{MaxSize: 1, MaxFiles: 2, MaxWorkers: 1, MonitorInterval: time.Second}, "greater than or equal to 3s"},
	} {
		err := tc.r.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
}

func TestRotatedLogsOrder(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"0.log", "0.log.20261202-100002", "0.log.20261202-100001.gz", "0.logx", "1.log.20261202-100000"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := rotatedLogs(filepath.Join(dir, "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "0.log.20261202-100001.gz"), filepath.Join(dir, "0.log.20261202-100002")}
	if !slices.Equal(got, want) {
		t.Errorf("rotated %v, want %v", got, want)
	}
}
