// Package buildinfo says what a binary was built from: version, commit, Go
// version and the CRI API it speaks, for `cri-compose version`.
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Commit is the source revision, set by the Makefile
// (-ldflags "-X github.com/cri-compose/cri-compose/pkg/buildinfo.Commit=…");
// when empty, the vcs.revision Go stamps into builds made in a checkout is
// used.
var Commit string

// CRIAPIModule is the module that defines the CRI API served.
const CRIAPIModule = "k8s.io/cri-api"

// Info describes one binary.
type Info struct {
	Program   string
	Version   string
	Commit    string // "" if unknown
	Modified  bool   // built from a tree with uncommitted changes
	GoVersion string
	Platform  string // GOOS/GOARCH
	// CRIAPI is the CRI API version served ("v1") and CRIAPIVersion the
	// version of CRIAPIModule built in ("" if unknown).
	CRIAPI        string
	CRIAPIVersion string
}

// Get describes this binary: program and version are the caller's (the
// version a -X flag may have set), the rest comes from the build.
func Get(program, version string) Info {
	i := Info{
		Program: program, Version: version, Commit: Commit,
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		CRIAPI: "v1",
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if i.Commit == "" {
				i.Commit = s.Value
			}
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	for _, d := range bi.Deps {
		if d.Path == CRIAPIModule {
			i.CRIAPIVersion = d.Version
			if d.Replace != nil {
				i.CRIAPIVersion = d.Replace.Version
			}
		}
	}
	return i
}

// Write prints the description, one fact a line.
func (i Info) Write(w io.Writer) error {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	if i.Modified {
		commit += " (modified)"
	}
	cri := i.CRIAPI
	if i.CRIAPIVersion != "" {
		cri += " (" + CRIAPIModule + " " + i.CRIAPIVersion + ")"
	}
	_, err := fmt.Fprintf(w, "%s %s\ncommit:   %s\ngo:       %s %s\nCRI API:  %s\n",
		i.Program, i.Version, commit, i.GoVersion, i.Platform, cri)
	return err
}
