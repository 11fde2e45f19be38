package cri

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestWaitExit: a watched process's exit is told at once, and a watch
// whose context ended tells nothing.
func TestWaitExit(t *testing.T) {
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}

	cmd := start()
	f, err := openPidfd(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	if _, err := waitExit(context.Background(), f, func() { close(exited) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		t.Fatal("exit told while the process runs")
	default:
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie has exited, and so has a container's
	// process before its shim reaps it.
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("exit not told 10s after the kill")
	}

	cmd = start()
	if f, err = openPidfd(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	told := make(chan struct{}, 1)
	done, err := waitExit(ctx, f, func() { told <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch went on 10s after its context ended")
	}
	select {
	case <-told:
		t.Fatal("exit told after the watch's context ended")
	default:
	}
}

// TestInContainer: a process is taken for a container's only when its
// cgroups name the container.
func TestInContainer(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	if err := inContainer(os.Getpid(), "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"); err == nil {
		t.Errorf("this test process taken for a container's: its cgroups are %q", b)
	}
}
