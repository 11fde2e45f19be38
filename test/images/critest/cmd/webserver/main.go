// Command webserver stands in for the web servers of the critest images
// (registry.k8s.io/e2e-test-images/nginx:1.14-2, httpd:2.4.39-4 and
// gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64), doing what critest
// checks of them. It is installed under the name of the server it plays, and
// that name picks the part:
//
//   - nginx: serves HTTP on $WEBSERVER_LISTEN (default ":80"), writes its PID
//     to /var/run/nginx.pid, and runs with "nginx: master process …" as its
//     command line (/proc/PID/cmdline), as nginx's master does: it re-executes
//     itself under that argv[0] first, keeping its PID, so that it is still
//     PID 1 of its container. The process name (comm) stays "nginx".
//   - httpd: serves HTTP on $WEBSERVER_LISTEN (default ":80") and logs a line
//     naming httpd to stderr when it is ready.
//
// GET / answers 200 with a small HTML page, every other path 404. SIGTERM,
// SIGINT and SIGQUIT stop it at once with status 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const (
	pidFile     = "/var/run/nginx.pid"
	titlePrefix = "nginx: master process "
)

func main() {
	log.SetFlags(0)
	role := filepath.Base(os.Args[0])
	if strings.HasPrefix(os.Args[0], titlePrefix) {
		role = "nginx"
	}
	switch role {
	case "nginx":
		if !strings.HasPrefix(os.Args[0], titlePrefix) {
			retitle()
		}
		log.SetPrefix("nginx: ")
	case "httpd":
		log.SetPrefix("httpd: ")
	default:
		log.Fatalf("webserver: run me as nginx or httpd, not %q", os.Args[0])
	}

	addr := os.Getenv("WEBSERVER_LISTEN")
	if addr == "" {
		addr = ":80"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatalf("[emerg] bind() to %s failed: %v", addr, err)
	}
	if role == "nginx" {
		if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o644); err != nil {
			log.Fatalf("[emerg] open() %q failed: %v", pidFile, err)
		}
		defer os.Remove(pidFile)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && r.URL.Path != "/index.html" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><title>Welcome to %[1]s!</title></head>\n"+
			"<body><h1>Welcome to %[1]s!</h1><p>cri-compose's critest stand-in.</p></body></html>\n", role)
	})
	srv := &http.Server{
		Handler:           logRequests(mux),
		ReadHeaderTimeout: 10 * time.Second,
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Printf("pid %d listening on %s", os.Getpid(), l.Addr())
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("[emerg] %v", err)
	}
}

// retitle re-executes the program as nginx's master names itself: one
// argument, "nginx: master process nginx -g daemon off;" (the original
// command line after the prefix). The PID stays, and so does the process
// name, which comes from the executable's file name.
func retitle() {
	exe, err := os.Executable()
	if err != nil {
		log.Fatalf("nginx: cannot find my executable: %v", err)
	}
	title := titlePrefix + strings.Join(append([]string{"nginx"}, os.Args[1:]...), " ")
	err = syscall.Exec(exe, []string{title}, os.Environ())
	log.Fatalf("nginx: re-exec %s: %v", exe, err)
}

// logRequests writes one access log line per request to stdout.
func logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		fmt.Printf("%s - - [%s] \"%s %s %s\" %d\n", r.RemoteAddr,
			time.Now().Format("02/Jan/2006:15:04:05 -0700"), r.Method, r.URL.RequestURI(), r.Proto, rec.status)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}
