package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"
)

// junitReport is the part of ginkgo's JUnit report read here.
type junitReport struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	} `xml:"error"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

// result is what a run of critest came to.
type result struct {
	passed, failed, skipped int
	failures                []failure // specs and suite nodes that failed, in report order
	files                   []string  // "what: path" of the run's reports and logs
}

type failure struct {
	name, status, reason string
}

func (r result) summary() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", r.passed, r.failed, r.skipped)
}

// print writes the failed specs with their reasons, the files, and the
// summary on the last line, alone.
func (r result) print(w io.Writer) {
	if len(r.failures) > 0 {
		fmt.Fprintf(w, "\nFailed (%d):\n", len(r.failures))
		for _, f := range r.failures {
			fmt.Fprintf(w, "  [%s] %s\n      %s\n", strings.ToUpper(f.status), f.name, f.reason)
		}
	}
	fmt.Fprintln(w)
	for _, f := range r.files {
		fmt.Fprintln(w, f)
	}
	fmt.Fprintln(w, r.summary())
}

// parseJUnit counts the specs ("[It] …" test cases) of the report at path by
// outcome. A failed suite node ([BeforeSuite], [AfterSuite], …) counts as a
// failure too: without it the specs it skipped would look merely skipped.
func parseJUnit(path string) (result, error) {
	var res result
	b, err := os.ReadFile(path)
	if err != nil {
		return res, err
	}
	var rep junitReport
	if err := xml.Unmarshal(b, &rep); err != nil {
		return res, fmt.Errorf("%s: %w", path, err)
	}
	n := 0
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			n++
			spec := strings.HasPrefix(c.Name, "[It] ")
			switch status := caseStatus(c); status {
			case "passed":
				if spec {
					res.passed++
				}
			case "skipped", "pending":
				if spec {
					res.skipped++
				}
			default: // failed, panicked, interrupted, aborted, timedout
				res.failed++
				res.failures = append(res.failures, failure{
					name:   strings.TrimPrefix(c.Name, "[It] "),
					status: status,
					reason: c.reason(),
				})
			}
		}
	}
	if n == 0 {
		return res, fmt.Errorf("%s: no test cases", path)
	}
	return res, nil
}

// caseStatus is ginkgo's status attribute, or what the elements say when an
// older writer left it out.
func caseStatus(c junitCase) string {
	if c.Status != "" {
		return c.Status
	}
	switch {
	case c.Failure != nil, c.Error != nil:
		return "failed"
	case c.Skipped != nil:
		return "skipped"
	}
	return "passed"
}

// reason is a failure's message on one line, cut to about two screen lines.
func (c junitCase) reason() string {
	msg := ""
	switch {
	case c.Failure != nil:
		msg = c.Failure.Message
		if strings.TrimSpace(msg) == "" {
			msg = c.Failure.Text
		}
	case c.Error != nil:
		msg = c.Error.Message
		if strings.TrimSpace(msg) == "" {
			msg = c.Error.Text
		}
	}
	return shorten(msg, 320)
}

// shorten folds every run of white space of msg into one space, keeps of a
// gomega "Unexpected error" its context and the gRPC error without gomega's
// dump of the error value, and cuts what is left to at most max characters,
// keeping its start and its end (where an engine's error message comes).
func shorten(msg string, max int) string {
	s := strings.Join(strings.Fields(msg), " ")
	if i := strings.Index(s, "rpc error: "); i >= 0 {
		context := s[:i]
		if j := strings.Index(context, " Unexpected error:"); j >= 0 {
			context = context[:j]
		}
		s = strings.TrimSpace(context+" ") + " " + s[i:]
		if j := strings.Index(s, " { s: {"); j >= 0 {
			s = s[:j]
		}
		s = strings.TrimSpace(s)
	}
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	head := max / 3
	return string(r[:head]) + " … " + string(r[len(r)-(max-head):])
}
