package bench

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// The summary: sections (a table each) and ratio lines that the benchmarks
// fill, printed once the benchmarks have run.
type section struct {
	title  string
	header []string
	rows   [][]string
	notes  []string
}

var summary struct {
	mu       sync.Mutex
	sections []*section
	ratios   []string
	machine  []string
}

func addSection(s *section) {
	summary.mu.Lock()
	summary.sections = append(summary.sections, s)
	summary.mu.Unlock()
}

func addRatio(format string, args ...any) {
	summary.mu.Lock()
	summary.ratios = append(summary.ratios, fmt.Sprintf(format, args...))
	summary.mu.Unlock()
}

func printSummary(took time.Duration, failed bool) {
	summary.mu.Lock()
	defer summary.mu.Unlock()
	if len(summary.sections) == 0 {
		return
	}
	var w strings.Builder
	fmt.Fprintf(&w, "\n## cri-compose benchmarks, %s (run took %v)\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	if failed {
		fmt.Fprintf(&w, "**A benchmark failed: this summary is partial.**\n\n")
	}
	fmt.Fprintf(&w, "command: %s\n", commandLine())
	if theEnv != nil {
		for _, l := range theEnv.machine {
			fmt.Fprintf(&w, "%s\n", l)
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			fmt.Fprintf(&w, "load average at end: %s %s %s\n", f[0], f[1], f[2])
		}
	}
	for _, s := range summary.sections {
		fmt.Fprintf(&w, "\n### %s\n\n", s.title)
		writeTable(&w, s.header, s.rows)
		for _, n := range s.notes {
			fmt.Fprintf(&w, "\n- %s", n)
		}
		if len(s.notes) > 0 {
			fmt.Fprintln(&w)
		}
	}
	if len(summary.ratios) > 0 {
		fmt.Fprintf(&w, "\n### Ratios and targets\n\n")
		for _, r := range summary.ratios {
			fmt.Fprintf(&w, "- %s\n", r)
		}
	}
	fmt.Print(w.String())
	if *flagReport != "" {
		if err := os.WriteFile(*flagReport, []byte(w.String()), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "[bench] -bench.report: %v\n", err)
		}
	}
}

func commandLine() string {
	args := []string{"go test"}
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.paniconexit0") || strings.HasPrefix(a, "-test.testlogfile") || strings.HasPrefix(a, "-test.timeout") {
			continue
		}
		args = append(args, strings.Replace(a, "-test.", "-", 1))
	}
	return strings.Join(args, " ")
}

// writeTable writes a markdown table with aligned columns.
func writeTable(w io.Writer, header []string, rows [][]string) {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(width) && utf8.RuneCountInString(c) > width[i] {
				width[i] = utf8.RuneCountInString(c)
			}
		}
	}
	line := func(cells []string) {
		fmt.Fprint(w, "|")
		for i := range width {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			fmt.Fprintf(w, " %s%s |", c, strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
		}
		fmt.Fprintln(w)
	}
	line(header)
	sep := make([]string, len(width))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
}

// --- numbers

// pct is the p-th percentile (0..100, nearest rank) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fms(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.3f", ms(d))
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f", ms(d))
	}
	return fmt.Sprintf("%.0f", ms(d))
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// metric is one value a leaf benchmark reports.
type metric struct {
	v    float64
	unit string
}

// leaf reports measured values as a benchmark of its own, so that
// benchstat reads them (one line per leaf; the measuring happened in the
// parent, so the leaf's own time means nothing and ns/op is what we set,
// or suppressed with 0).
func leaf(b *testing.B, name string, ms ...metric) {
	b.Run(name, func(b *testing.B) {
		ns := false
		for _, m := range ms {
			b.ReportMetric(m.v, m.unit)
			ns = ns || m.unit == "ns/op"
		}
		if !ns {
			b.ReportMetric(0, "ns/op")
		}
	})
}
