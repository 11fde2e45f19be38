package projectcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	cricomposev1 "github.com/cri-compose/cri-compose/proto/cricompose/v1"
)

// IO is where a subcommand writes.
type IO struct {
	Stdout, Stderr io.Writer
}

// common are the flags of every subcommand here.
type common struct {
	endpoint string
	timeout  time.Duration
}

func newFlagSet(name, usage string, defaultEndpoint string, c *common, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	help := "cri-compose's socket"
	fs.StringVar(&c.endpoint, "runtime-endpoint", defaultEndpoint, help)
	fs.StringVar(&c.endpoint, "listen", defaultEndpoint, help+" (the server's --listen; same as --runtime-endpoint)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "%s\nFlags:\n", usage)
		fs.PrintDefaults()
	}
	return fs
}

// RunExport is `cri-compose export POD [-o DIR]`: it exports the pod from
// the running cri-compose and writes compose.yaml and its files into DIR
// (default ./<project>). It returns the exit status.
func RunExport(args []string, defaultEndpoint string, o IO) int {
	var (
		c       common
		out     string
		replace bool
	)
	fs := newFlagSet("cri-compose export", "Usage: cri-compose export [flags] POD\n\n"+
		"Exports the pod POD (a pod sandbox id or unique prefix, namespace/name, name, or Compose project)\n"+
		"from the running cri-compose as a compose project that `docker compose up -d` runs on its own:\n"+
		"DIR/compose.yaml, and the files of the pod's mounts beside it.\n", defaultEndpoint, &c, o.Stderr)
	fs.StringVar(&out, "o", "", "folder to write the project into (default ./<project name>)")
	fs.BoolVar(&replace, "force", false, "replace an export already in the folder")
	if err := fs.Parse(interspersed(fs, args)); err != nil {
		return parseStatus(err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	ctx, cancel := signalContext(c.timeout)
	defer cancel()
	conn, err := Dial(c.endpoint)
	if err != nil {
		fmt.Fprintln(o.Stderr, "cri-compose export:", err)
		return 1
	}
	defer conn.Close()
	resp, err := Export(ctx, cricomposev1.NewProjectsClient(conn), fs.Arg(0))
	if err != nil {
		fmt.Fprintf(o.Stderr, "cri-compose export %s: %v\n", fs.Arg(0), err)
		return 1
	}
	name := resp.GetProjectName()
	if out == "" {
		if name == "" || !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) {
			fmt.Fprintf(o.Stderr, "cri-compose export: the server named the project %q; give a folder with -o\n", name)
			return 1
		}
		out = name
	}
	if err := WriteExport(resp, out, replace); err != nil {
		fmt.Fprintf(o.Stderr, "cri-compose export: write %s: %v\n", out, err)
		return 1
	}
	var size int64
	for _, f := range resp.GetFiles() {
		size += int64(len(f.GetContent()))
	}
	fmt.Fprintf(o.Stdout, "exported project %s to %s: %s and %d files (%d bytes)\n", name, out, ComposeFile, len(resp.GetFiles()), size)
	for _, w := range resp.GetWarnings() {
		fmt.Fprintln(o.Stderr, "warning:", w)
	}
	fmt.Fprintf(o.Stdout, "run it with: docker compose --project-directory %s up -d\n", out)
	return 0
}

// RunProjects is `cri-compose projects`: a table of the pods of the
// running cri-compose as Compose projects, with their services. It returns
// the exit status.
func RunProjects(args []string, defaultEndpoint string, o IO) int {
	var (
		c      common
		format string
	)
	fs := newFlagSet("cri-compose projects", "Usage: cri-compose projects [flags]\n\n"+
		"Lists the pods of the running cri-compose as Compose projects, with their services.\n", defaultEndpoint, &c, o.Stderr)
	fs.StringVar(&format, "format", "table", "table or json")
	if err := fs.Parse(args); err != nil {
		return parseStatus(err)
	}
	if fs.NArg() != 0 || (format != "table" && format != "json") {
		fs.Usage()
		return 2
	}
	ctx, cancel := signalContext(c.timeout)
	defer cancel()
	conn, err := Dial(c.endpoint)
	if err != nil {
		fmt.Fprintln(o.Stderr, "cri-compose projects:", err)
		return 1
	}
	defer conn.Close()
	resp, err := cricomposev1.NewProjectsClient(conn).ListProjects(ctx, &cricomposev1.ListProjectsRequest{})
	if err != nil {
		fmt.Fprintln(o.Stderr, "cri-compose projects:", err)
		return 1
	}
	if format == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(resp)
		if err != nil {
			fmt.Fprintln(o.Stderr, "cri-compose projects:", err)
			return 1
		}
		fmt.Fprintln(o.Stdout, string(b))
		return 0
	}
	if err := WriteTable(o.Stdout, resp.GetProjects(), time.Now()); err != nil {
		return 1
	}
	return 0
}

// WriteTable writes one row per project: its name, pod, pod sandbox id,
// state, age and services with their states.
func WriteTable(w io.Writer, projects []*cricomposev1.Project, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECT\tPOD\tPOD ID\tSTATE\tCREATED\tSERVICES")
	for _, p := range projects {
		var svcs []string
		for _, s := range p.GetServices() {
			svcs = append(svcs, s.GetName()+" ("+serviceState(s)+")")
		}
		md := p.GetMetadata()
		fmt.Fprintf(tw, "%s\t%s/%s\t%.13s\t%s\t%s\t%s\n", p.GetName(), md.GetNamespace(), md.GetName(),
			p.GetPodSandboxId(), projectState(p.GetState()), age(now, p.GetCreatedAt()), strings.Join(svcs, ", "))
	}
	return tw.Flush()
}

func projectState(s cricomposev1.ProjectState) string {
	switch s {
	case cricomposev1.ProjectState_PROJECT_STATE_READY:
		return "Ready"
	case cricomposev1.ProjectState_PROJECT_STATE_NOTREADY:
		return "NotReady"
	}
	return "Unknown"
}

func serviceState(s *cricomposev1.Service) string {
	switch s.GetState() {
	case cricomposev1.ServiceState_SERVICE_STATE_CREATED:
		return "created"
	case cricomposev1.ServiceState_SERVICE_STATE_RUNNING:
		return "running"
	case cricomposev1.ServiceState_SERVICE_STATE_EXITED:
		return fmt.Sprintf("exited %d", s.GetExitCode())
	}
	return "unknown"
}

// age is how long ago ns (Unix nanoseconds) was, as kubectl says it.
func age(now time.Time, ns int64) string {
	if ns <= 0 {
		return "-"
	}
	d := now.Sub(time.Unix(0, ns))
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// parseStatus is the exit status after a flag parse error: 0 for -help.
func parseStatus(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

// interspersed moves flags given after the positional argument (export
// POD -o DIR) before it, as the flag package stops at the first
// non-flag.
func interspersed(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return append(append(flags, "--"), pos...)
}

// signalContext ends on SIGINT or SIGTERM, or after timeout.
func signalContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}
