// Command pgrep lists the processes whose name matches a pattern, like
// procps' and busybox's pgrep, for the critest busybox image: Debian's
// busybox-static has no pgrep applet, and critest's "execSync with timeout"
// spec runs `sh -c "pgrep sleep || true"` to check that a timed-out exec was
// killed.
//
// Usage: pgrep [-flnoxv] [-a] [-c] PATTERN
//
// PATTERN is an extended regular expression matched against the process
// name (/proc/PID/comm), or against the whole command line with -f. It prints
// one PID per line (with -l the name too, with -a the command line) and exits
// 0 when some process matched, 1 when none did, 2 on a usage error. pgrep
// never lists itself.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

type proc struct {
	pid     int
	name    string
	cmdline string
	start   uint64 // clock ticks after boot, field 22 of /proc/PID/stat
}

func main() {
	fs := flag.NewFlagSet("pgrep", flag.ContinueOnError)
	full := fs.Bool("f", false, "match against the full command line")
	exact := fs.Bool("x", false, "match the whole name (or command line with -f)")
	invert := fs.Bool("v", false, "list the processes that do not match")
	listName := fs.Bool("l", false, "print the process name with the PID")
	listFull := fs.Bool("a", false, "print the full command line with the PID")
	count := fs.Bool("c", false, "print the number of matches only")
	newest := fs.Bool("n", false, "list only the newest matching process")
	oldest := fs.Bool("o", false, "list only the oldest matching process")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: pgrep [-flnoxvac] PATTERN")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	expr := fs.Arg(0)
	if *exact {
		expr = "^(?:" + expr + ")$"
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pgrep: bad pattern %q: %v\n", fs.Arg(0), err)
		os.Exit(2)
	}

	var matched []proc
	for _, p := range processes() {
		subject := p.name
		if *full && p.cmdline != "" {
			subject = p.cmdline
		}
		if re.MatchString(subject) != *invert {
			matched = append(matched, p)
		}
	}
	if (*newest || *oldest) && len(matched) > 1 {
		sort.SliceStable(matched, func(i, j int) bool { return matched[i].start < matched[j].start })
		if *newest {
			matched = matched[len(matched)-1:]
		} else {
			matched = matched[:1]
		}
	}
	if *count {
		fmt.Println(len(matched))
	} else {
		for _, p := range matched {
			switch {
			case *listFull:
				c := p.cmdline
				if c == "" {
					c = p.name
				}
				fmt.Println(p.pid, c)
			case *listName:
				fmt.Println(p.pid, p.name)
			default:
				fmt.Println(p.pid)
			}
		}
	}
	if len(matched) == 0 {
		os.Exit(1)
	}
}

// processes lists the processes of /proc but this one, sorted by PID.
// Processes that exit while being read are left out.
func processes() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgrep:", err)
		os.Exit(3)
	}
	self := os.Getpid()
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// "PID (comm) state ...": comm may hold spaces and parentheses.
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		p := proc{pid: pid, name: string(stat[open+1 : end])}
		if fields := strings.Fields(string(stat[end+1:])); len(fields) > 19 {
			p.start, _ = strconv.ParseUint(fields[19], 10, 64)
		}
		if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
			p.cmdline = strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " ")
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}
