package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// watchExit calls exited once process pid, the main process of container
// id, has exited, unless ctx ends first. The engine must run on this host,
// in this process's PID namespace: a pid that is not, or that is no longer
// the container's (its cgroup does not name the container), is refused
// with an error, and nothing is watched.
//
// The engine tells of an exit only after it has given the process's output
// 2 s to drain (moby's handleContainerExit); a process watched through a
// pidfd is seen to exit at once.
func watchExit(ctx context.Context, pid int, id string, exited func()) error {
	f, err := openPidfd(pid)
	if err != nil {
		return err
	}
	// Opened first, checked after: the pidfd is then of the process the
	// check saw, even if the pid is reused in between.
	if err := inContainer(pid, id); err != nil {
		f.Close()
		return err
	}
	_, err = waitExit(ctx, f, exited)
	return err
}

// openPidfd opens a pidfd of process pid. It is non-blocking, so it goes
// to the runtime's poller: waiting for the process to exit (the pidfd
// readable) then costs no thread.
func openPidfd(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd of process %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}

// waitExit calls exited once the process of pidfd f has exited, unless ctx
// ends first; it closes f either way, and then done.
func waitExit(ctx context.Context, f *os.File, exited func()) (done <-chan struct{}, err error) {
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pidfd: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		defer stop()
		err := rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 0)
			return err != nil || n > 0
		})
		if err == nil && ctx.Err() == nil {
			exited()
		}
		f.Close()
	}()
	return ch, nil
}

// inContainer checks that process pid belongs to container id: a cgroup of
// it names the container (/docker/<id>, docker-<id>.scope, or a pod
// cgroup's <id>), as it does under either cgroup driver.
func inContainer(pid int, id string) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return fmt.Errorf("process %d: %w", pid, err)
	}
	if !strings.Contains(string(b), id) {
		return fmt.Errorf("process %d: %w", pid, errNotContainers)
	}
	return nil
}

var errNotContainers = errors.New("not the container's: its cgroups do not name it")
