// Package doctor checks whether a host can run cri-compose well and says
// what works, what degrades and why: the engine (reachable, versions,
// storage and cgroup drivers), the host's capability bounding set (negative
// oom_score_adj, privileged), AppArmor and seccomp, Compose for operators,
// the state dir and sockets, the clock against the engine's, and the
// sysctls that cluster networking (kube-proxy, an overlay) needs.
//
// Gather reads the facts (engine calls, files, the PATH; nothing is run);
// Evaluate turns them into a Report without touching the host, so the
// judgement is unit-tested on made-up facts.
package doctor

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Status is a check's outcome.
type Status int

const (
	// OK: works as intended.
	OK Status = iota
	// Degraded: works, with a feature missing or clamped (Detail says which).
	Degraded
	// Fail: cri-compose cannot work (or is unsafe) until this is fixed.
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Degraded:
		return "degraded"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Check is one row of the report.
type Check struct {
	Name   string
	Status Status
	Detail string
}

// Report is every check, in a stable order.
type Report struct {
	Checks []Check
}

// Failed reports whether any check failed: the doctor then exits 1.
func (r Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Status == Fail {
			return true
		}
	}
	return false
}

// Get returns the check named name.
func (r Report) Get(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// WriteTable prints the report as one table: CHECK, STATUS, DETAIL.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range r.Checks {
		// Keep one row per check whatever the detail holds.
		detail := strings.Join(strings.Fields(c.Detail), " ")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Status, detail)
	}
	return tw.Flush()
}
