package dockerapi

import (
	"maps"
	"slices"
	"testing"
)

// TestBridgeOptions: a network is made with only the options that differ
// from the engine's defaults, and reads back as what it was made with; a
// network without them (the engine's defaults, or an older cri-compose's)
// reads back as the zero value.
func TestBridgeOptions(t *testing.T) {
	for _, tc := range []struct {
		o    BridgeOptions
		made map[string]string
	}{
		{BridgeOptions{}, nil},
		{BridgeOptions{NoIPMasquerade: true}, map[string]string{OptionIPMasquerade: "false"}},
		{BridgeOptions{MTU: 1450}, map[string]string{OptionMTU: "1450"}},
		{BridgeOptions{NoIPMasquerade: true, MTU: 1450}, map[string]string{OptionIPMasquerade: "false", OptionMTU: "1450"}},
	} {
		got := tc.o.driverOptions()
		if !maps.Equal(got, tc.made) {
			t.Errorf("%+v: made with %v, want %v", tc.o, got, tc.made)
		}
		if back := ParseBridgeOptions(got); back != tc.o {
			t.Errorf("%+v: reads back as %+v", tc.o, back)
		}
	}
	for _, tc := range []struct {
		opts map[string]string
		want BridgeOptions
	}{
		// Set by hand (docker network create -o), or the engine's words.
		{map[string]string{OptionIPMasquerade: "true", OptionMTU: "1500"}, BridgeOptions{MTU: 1500}},
		{map[string]string{OptionIPMasquerade: "0"}, BridgeOptions{NoIPMasquerade: true}},
		{map[string]string{"com.docker.network.bridge.name": "br0"}, BridgeOptions{}},
		// What the engine would refuse reads as its default.
		{map[string]string{OptionIPMasquerade: "maybe", OptionMTU: "big"}, BridgeOptions{}},
		{map[string]string{OptionMTU: "-1"}, BridgeOptions{}},
	} {
		if got := ParseBridgeOptions(tc.opts); got != tc.want {
			t.Errorf("ParseBridgeOptions(%v) = %+v, want %+v", tc.opts, got, tc.want)
		}
	}
}

func TestBridgeOptionsDiff(t *testing.T) {
	for _, tc := range []struct {
		want, have BridgeOptions
		diff       []string
	}{
		{BridgeOptions{}, BridgeOptions{}, nil},
		{BridgeOptions{NoIPMasquerade: true, MTU: 1450}, BridgeOptions{NoIPMasquerade: true, MTU: 1450}, nil},
		{BridgeOptions{NoIPMasquerade: true}, BridgeOptions{}, []string{"ip masquerade on (wanted off)"}},
		{BridgeOptions{}, BridgeOptions{NoIPMasquerade: true}, []string{"ip masquerade off (wanted on)"}},
		{BridgeOptions{MTU: 1450}, BridgeOptions{}, []string{"mtu the engine's default (wanted 1450)"}},
		// 1500 given by hand is not the engine's default to compare with:
		// dockerd's --mtu may say otherwise.
		{BridgeOptions{}, BridgeOptions{MTU: 1500}, []string{"mtu 1500 (wanted the engine's default)"}},
		{BridgeOptions{NoIPMasquerade: true, MTU: 1450}, BridgeOptions{MTU: 1400},
			[]string{"ip masquerade on (wanted off)", "mtu 1400 (wanted 1450)"}},
	} {
		if got := tc.want.Diff(tc.have); !slices.Equal(got, tc.diff) {
			t.Errorf("%+v.Diff(%+v) = %q, want %q", tc.want, tc.have, got, tc.diff)
		}
	}
}
