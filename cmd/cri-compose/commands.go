package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/cri-compose/cri-compose/pkg/buildinfo"
	"github.com/cri-compose/cri-compose/pkg/cri"
	"github.com/cri-compose/cri-compose/pkg/doctor"
	"github.com/cri-compose/cri-compose/pkg/flagdoc"
	"github.com/cri-compose/cri-compose/pkg/projectcli"
)

var stdio = projectcli.IO{Stdout: os.Stdout, Stderr: os.Stderr}

// defaultListen is the server's default socket, where the client
// subcommands find it unless told otherwise.
func defaultListen() string { return newFlags("", &options{}).Lookup("listen").DefValue }

// subcommands run instead of the server when named first
// (`cri-compose doctor`); each returns the exit status.
var subcommands = map[string]func(args []string) int{
	"doctor":  runDoctor,
	"version": runVersion,
	// Clients of a running cri-compose (pkg/projectcli).
	"export":   func(args []string) int { return projectcli.RunExport(args, defaultListen(), stdio) },
	"projects": func(args []string) int { return projectcli.RunProjects(args, defaultListen(), stdio) },
	// Hidden: prints its section of docs/configuration.md, or updates it
	// in the file named (go generate, docs_test.go).
	"config-reference": runConfigReference,
}

// runDoctor checks the host with the settings the server would run with
// (the same flags and --config) and prints one table; it exits 1 if a
// check failed.
func runDoctor(args []string) int {
	var o options
	fs := newFlags("cri-compose doctor", &o)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: cri-compose doctor [flags]\n\n"+
			"Checks the engine and the host with the settings cri-compose would run with, prints\n"+
			"check | status (ok, degraded, fail) | detail, and exits 1 if a check failed.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := parseOptions(fs, &o, args); err != nil {
		fmt.Fprintln(os.Stderr, "cri-compose doctor:", err)
		return 1
	}
	var subnets []netip.Prefix
	if o.NetworkSubnet != "" {
		var err error
		if subnets, err = cri.ParseSubnets(o.NetworkSubnet); err != nil {
			fmt.Fprintln(os.Stderr, "cri-compose doctor: --network-subnet:", err)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	r := doctor.Evaluate(doctor.Gather(ctx, doctor.Config{
		DockerHost: o.DockerHost, Endpoint: o.endpoint(), StateDir: o.StateDir, Listen: o.Listen,
		Network: o.Network, NetworkSubnets: subnets,
	}))
	if err := r.WriteTable(os.Stdout); err != nil {
		return 1
	}
	if r.Failed() {
		return 1
	}
	return 0
}

// runVersion prints version, commit, Go version and the CRI API version.
func runVersion(args []string) int {
	if len(args) > 0 {
		fmt.Fprintln(os.Stderr, "usage: cri-compose version")
		return 2
	}
	if err := buildinfo.Get("cri-compose", cri.Version).Write(os.Stdout); err != nil {
		return 1
	}
	return 0
}

func runConfigReference(args []string) int {
	switch len(args) {
	case 0:
		if err := writeConfigReference(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "cri-compose config-reference:", err)
			return 1
		}
	case 1:
		if err := flagdoc.UpdateFile(args[0], referenceSection, configReference()); err != nil {
			fmt.Fprintln(os.Stderr, "cri-compose config-reference:", err)
			return 1
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: cri-compose config-reference [docs/configuration.md]")
		return 2
	}
	return 0
}
