package main

import (
	"flag"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/cri-compose/cri-compose/pkg/flagdoc"
)

// TestListenAddress checks that the kubelet API is never served open to
// anyone (anonymous, AlwaysAllow) beyond loopback.
func TestListenAddress(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		guarded bool
		want    string
		err     bool
	}{
		{":10250", false, "127.0.0.1:10250", false},
		{":10250", true, ":10250", false},
		{"0.0.0.0:10250", false, "", true},
		{"192.0.2.7:10250", false, "", true},
		{"192.0.2.7:10250", true, "192.0.2.7:10250", false},
		{"127.0.0.1:9", false, "127.0.0.1:9", false},
		{"[::1]:9", false, "[::1]:9", false},
		{"localhost:9", false, "localhost:9", false},
		{"nonsense", false, "", true},
	} {
		got, err := listenAddress(tc.addr, tc.guarded)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("listenAddress(%q, guarded=%v) = %q, %v; want %q, error %v", tc.addr, tc.guarded, got, err, tc.want, tc.err)
		}
	}
}

func TestParseTaints(t *testing.T) {
	ts, err := parseTaints(defaultTaint + ", dedicated:NoExecute")
	if err != nil {
		t.Fatal(err)
	}
	want := []v1.Taint{
		{Key: "virtual-kubelet.io/provider", Value: "cri-compose", Effect: v1.TaintEffectNoSchedule},
		{Key: "dedicated", Effect: v1.TaintEffectNoExecute},
	}
	if len(ts) != 2 || ts[0] != want[0] || ts[1] != want[1] {
		t.Errorf("got %v", ts)
	}
	if ts, err := parseTaints(""); err != nil || len(ts) != 0 {
		t.Errorf("empty: %v %v", ts, err)
	}
	for _, bad := range []string{"key", "key=v:Sometimes", "=v:NoSchedule"} {
		if _, err := parseTaints(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestReservedFlag checks --kube-reserved as kubelet reads it: pairs,
// repeatable, the later value of a resource winning.
func TestReservedFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f reservedFlag
	fs.Var(&f, "kube-reserved", "")
	if err := fs.Parse([]string{"--kube-reserved=cpu=100m,memory=1Gi", "--kube-reserved", "memory=256Mi,pid=1000"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.String(), "cpu=100m,memory=256Mi,pid=1k"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := fs.Parse([]string{"--kube-reserved=nvidia.com/gpu=1"}); err == nil {
		t.Error("a GPU reservation was accepted")
	}
}

var update = flag.Bool("update", false, "rewrite vk-cri's section of docs/configuration.md from the flags")

const referencePath = "../../docs/configuration.md"

// TestConfigurationReference fails when vk-cri's section of
// docs/configuration.md is not what the flag definitions say (make docs,
// or -update, rewrites it).
func TestConfigurationReference(t *testing.T) {
	if err := flagdoc.Sync(referencePath, referenceSection, configReference(), *update); err != nil {
		t.Error(err)
	}
}

// TestFlagNames checks that kubelet's name of a flag and vk-cri's older
// name both set the same setting, and that the defaults are kept.
func TestFlagNames(t *testing.T) {
	for _, tc := range []struct {
		name, alias, value string
		got                func(*options) string
	}{
		{"container-runtime-endpoint", "cri-endpoint", "unix:///tmp/x.sock", func(o *options) string { return o.criEndpoint }},
		{"hostname-override", "nodename", "edge-1", func(o *options) string { return o.nodeName }},
		{"max-pods", "pods", "7", func(o *options) string { return strconv.FormatInt(o.pods, 10) }},
		{"root-dir", "state-dir", "/tmp/vk-state", func(o *options) string { return o.stateDir }},
		{"register-with-taints", "taint", "a=b:NoExecute", func(o *options) string { return o.taints }},
		{"sync-frequency", "resync", "7s", func(o *options) string { return o.resync.String() }},
	} {
		for _, flagName := range []string{tc.name, tc.alias} {
			var o options
			fs := newFlags("t", &o)
			if err := parseOptions(fs, &o, []string{"--" + flagName + "=" + tc.value}); err != nil {
				t.Fatalf("--%s: %v", flagName, err)
			}
			if got := tc.got(&o); got != tc.value {
				t.Errorf("--%s=%s: setting is %q", flagName, tc.value, got)
			}
		}
		if deprecatedAliases[tc.alias] != tc.name {
			t.Errorf("--%s is not listed as the alias of --%s", tc.alias, tc.name)
		}
	}
	if len(deprecatedAliases) != 6 {
		t.Errorf("deprecatedAliases has %d entries; the table above checks 6", len(deprecatedAliases))
	}

	t.Setenv("KUBECONFIG", "/tmp/kc")
	var o options
	if err := parseOptions(newFlags("t", &o), &o, nil); err != nil {
		t.Fatal(err)
	}
	hostname, _ := os.Hostname()
	if o.criEndpoint != "unix:///run/cri-compose/cri-compose.sock" || o.pods != 110 || o.stateDir != "/var/lib/vk-cri" ||
		o.taints != defaultTaint || o.resync != 30*time.Second || o.requestTimeout != 2*time.Minute ||
		o.kubeconfig != "/tmp/kc" || o.nodeName != strings.ToLower(hostname) {
		t.Errorf("defaults: %+v", o)
	}
}
