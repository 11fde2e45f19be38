// Command pause is cri-compose's pod infrastructure ("pause") process. It
// holds a pod sandbox's namespaces open and does nothing else: it blocks
// until SIGINT or SIGTERM and then exits 0. When the pod shares one PID
// namespace it is PID 1 there, so it also reaps the zombies of orphaned
// processes whenever SIGCHLD arrives.
//
// With "-forward PORT" it is instead a port-forward relay: run
// by an exec in the infra container, so in the pod's network namespace, it
// connects to 127.0.0.1:PORT and copies stdin to the connection and the
// connection to stdout. cri-compose forwards ports of pods on a remote
// engine through it, over the engine's API, with nothing else in the pod.
//
// It is built static (CGO_ENABLED=0) by `make pause` into pkg/pause/pause.bin,
// which pkg/pause embeds into the pause image.
package main

import (
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		os.Stdout.WriteString("cri-compose pause\n")
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "-forward" {
		os.Exit(forward(os.Args[2]))
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

// forward relays stdin and stdout to 127.0.0.1:port (or [::1]:port): the
// connection's end of input is passed on as a half-close, and the relay
// ends when the pod closes its side. A refused port is reported on stderr
// with exit code 1.
func forward(port string) int {
	conn, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		conn, err = net.Dial("tcp6", net.JoinHostPort("::1", port))
	}
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	go func() {
		_, err := io.Copy(conn, os.Stdin)
		if err == nil {
			_ = conn.(*net.TCPConn).CloseWrite()
			return
		}
		conn.Close()
	}()
	if _, err := io.Copy(os.Stdout, conn); err != nil {
		return 1
	}
	return 0
}
