// Command pause is cri-compose's pod infrastructure ("pause") process. It
// holds a pod sandbox's namespaces open and does nothing else: it blocks
// until SIGINT or SIGTERM and then exits 0. When the pod shares one PID
// namespace it is PID 1 there, so it also reaps the zombies of orphaned
// processes whenever SIGCHLD arrives.
//
// It is built static (CGO_ENABLED=0) by `make pause` into pkg/pause/pause.bin,
// which pkg/pause embeds into the pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		os.Stdout.WriteString("cri-compose pause\n")
		return
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	// Children that died before Notify took effect.
	reap()
	for sig := range sigs {
		switch sig {
		case syscall.SIGINT, syscall.SIGTERM:
			os.Exit(0)
		case syscall.SIGCHLD:
			reap()
		}
	}
}

// reap collects every child that has exited, without blocking. SIGCHLD
// signals coalesce, so one signal may stand for many children.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
