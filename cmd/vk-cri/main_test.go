package main

import (
	"flag"
	"io"
	"testing"

	v1 "k8s.io/api/core/v1"
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
