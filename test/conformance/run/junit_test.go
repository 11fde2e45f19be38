package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sampleJUnit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="1" errors="0" failures="2" time="10">
  <testsuite name="CRI validation" package="/tmp" tests="5" disabled="1" skipped="1" errors="0" failures="2" time="10">
    <testcase name="[BeforeSuite]" classname="CRI validation" status="passed" time="0"></testcase>
    <testcase name="[It] [k8s.io] A passes" classname="CRI validation" status="passed" time="1"></testcase>
    <testcase name="[It] [k8s.io] B is skipped" classname="CRI validation" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [k8s.io] C fails" classname="CRI validation" status="failed" time="2">
      <failure message="failed to create container&#xA;Unexpected error:&#xA;    &lt;*status.Error | 0xc000&gt;: &#xA;    rpc error: code = InvalidArgument desc = invalid CapAdd: unknown capability: &#34;CAP_BPF&#34;&#xA;    {&#xA;        s: {&#xA;            s: {}}}" type="failed">[FAILED] ...</failure>
    </testcase>
    <testcase name="[It] [k8s.io] D times out" classname="CRI validation" status="timedout" time="60">
      <failure message="" type="timedout">timed out</failure>
    </testcase>
  </testsuite>
</testsuites>`

func TestParseJUnit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := os.WriteFile(path, []byte(sampleJUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := parseJUnit(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.summary(), "1 passed, 2 failed, 1 skipped"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if len(res.failures) != 2 {
		t.Fatalf("failures: %+v", res.failures)
	}
	f := res.failures[0]
	if f.name != "[k8s.io] C fails" || f.status != "failed" {
		t.Errorf("first failure %+v", f)
	}
	if want := `failed to create container rpc error: code = InvalidArgument desc = invalid CapAdd: unknown capability: "CAP_BPF"`; f.reason != want {
		t.Errorf("reason %q, want %q", f.reason, want)
	}
	if res.failures[1].reason != "timed out" {
		t.Errorf("timeout reason %q", res.failures[1].reason)
	}
}

func TestShorten(t *testing.T) {
	long := "start " + strings.Repeat("x ", 500) + "the end"
	got := shorten(long, 60)
	if !strings.HasPrefix(got, "start ") || !strings.HasSuffix(got, "the end") || len([]rune(got)) > 63 {
		t.Errorf("shorten: %q", got)
	}
}

func TestModuleVersion(t *testing.T) {
	for _, mod := range []string{"sigs.k8s.io/cri-tools", "github.com/onsi/ginkgo/v2"} {
		got, err := moduleVersion("../tools/go.mod", mod)
		if err != nil || !strings.HasPrefix(got, "v") {
			t.Errorf("moduleVersion(%s) = %q, %v", mod, got, err)
		}
	}
}
