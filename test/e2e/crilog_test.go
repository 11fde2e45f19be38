package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// logRecord is one line of a CRI log file:
// "<RFC3339Nano> <stdout|stderr> <F|P> <content>".
type logRecord struct {
	Time    time.Time
	Stream  string
	Tag     string
	Content string
}

var criLine = regexp.MustCompile(`^(\S+) (stdout|stderr) (F|P) (.*)$`)

// readCRILog parses a CRI log file strictly, written by kubelet's rules
// (and not by pkg/cri/crilog, which this checks): every line must be a
// record, and a missing file has no records.
func readCRILog(path string) ([]logRecord, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, nil
	}
	if b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("%s: last line is not terminated: %q", path, b[max(0, len(b)-80):])
	}
	var recs []logRecord
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		m := criLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s:%d: not a CRI log record: %q", path, i+1, line)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: timestamp: %v", path, i+1, err)
		}
		recs = append(recs, logRecord{Time: ts, Stream: m[2], Tag: m[3], Content: m[4]})
	}
	return recs, nil
}

// lineNumbers returns N of every "line N" record, in file order.
func lineNumbers(recs []logRecord) []int {
	var ns []int
	for _, r := range recs {
		if n, ok := strings.CutPrefix(r.Content, "line "); ok {
			if v, err := strconv.Atoi(n); err == nil {
				ns = append(ns, v)
			}
		}
	}
	return ns
}

// checkSequence says what is wrong with ns if it is not exactly 1, 2, …, N.
func checkSequence(ns []int) error {
	seen := map[int]int{}
	var problems []string
	for i, n := range ns {
		seen[n]++
		if n != i+1 && len(problems) < 10 {
			problems = append(problems, fmt.Sprintf("record %d is line %d", i+1, n))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	var dups, missing []int
	for n, c := range seen {
		if c > 1 {
			dups = append(dups, n)
		}
	}
	for n := 1; n <= len(ns); n++ {
		if seen[n] == 0 {
			missing = append(missing, n)
		}
	}
	return fmt.Errorf("lines are not 1..N exactly once: duplicated %v, missing %v; %s",
		dups, missing, strings.Join(problems, ", "))
}

// engineLog is the container's stdout and stderr as the engine keeps it,
// each message as "<RFC3339Nano> <content>".
func engineLog(t *testing.T, id string) (stdout, stderr []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := engine.ContainerLogs(ctx, id, time.Time{}, false)
	if err != nil {
		t.Fatalf("engine logs of %s: %v", id, err)
	}
	defer rc.Close()
	var o, e bytes.Buffer
	if _, err := stdcopy.StdCopy(&o, &e, rc); err != nil {
		t.Fatalf("engine logs of %s: %v", id, err)
	}
	return splitLines(o.Bytes()), splitLines(e.Bytes())
}

func splitLines(b []byte) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}
