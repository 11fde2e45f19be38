package main

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cri-compose/cri-compose/pkg/flagdoc"
)

var update = flag.Bool("update", false, "rewrite cri-compose's section of docs/configuration.md from the flags")

const referencePath = "../../docs/configuration.md"

// TestConfigurationReference fails when cri-compose's section of
// docs/configuration.md is not what the flag definitions say (make docs,
// or go test ./cmd/cri-compose -run TestConfigurationReference -update,
// rewrites it).
func TestConfigurationReference(t *testing.T) {
	if err := flagdoc.Sync(referencePath, referenceSection, configReference(), *update); err != nil {
		t.Error(err)
	}
}

// TestFileKeysNameFlags checks fileConfig's flag tags: every config key
// names a defined flag, and every flag bound into fileConfig has a key.
func TestFileKeysNameFlags(t *testing.T) {
	var o options
	fs := newFlags("test", &o)
	keys := fileKeys()
	if len(keys) != reflect.TypeFor[fileConfig]().NumField() {
		t.Errorf("fileConfig has %d fields but %d flag tags", reflect.TypeFor[fileConfig]().NumField(), len(keys))
	}
	for name, key := range keys {
		if fs.Lookup(name) == nil {
			t.Errorf("config key %s: flag tag names no flag %q", key, name)
		}
	}
}

// TestConfigFileKeys sets every string key of the config file to a marker
// and checks that mergeFile hands it to the flag the reference says.
func TestConfigFileKeys(t *testing.T) {
	var o options
	fs := newFlags("test", &o)
	var yml strings.Builder
	want := map[string]string{}
	rt := reflect.TypeFor[fileConfig]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if f.Type.Kind() != reflect.String {
			continue
		}
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		v := "value-of-" + key
		yml.WriteString(key + ": " + v + "\n")
		want[f.Tag.Get("flag")] = v
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yml.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := parseOptions(fs, &o, []string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	for name, v := range want {
		if got := fs.Lookup(name).Value.String(); got != v {
			t.Errorf("config key for --%s: flag is %q after mergeFile, want %q (a pick line missing in mergeFile?)", name, got, v)
		}
	}
}

// TestConfigFileNetworkOptions: the pod network's options from the file,
// false and a number included, unless the command line says otherwise.
func TestConfigFileNetworkOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("ipMasq: false\nnetworkMTU: 1450\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		ipMasq bool
		mtu    int
	}{
		{nil, true, 0},
		{[]string{"--config", path}, false, 1450},
		{[]string{"--config", path, "--ip-masq=true", "--network-mtu", "1400"}, true, 1400},
	} {
		var o options
		fs := newFlags("test", &o)
		if err := parseOptions(fs, &o, tc.args); err != nil {
			t.Fatal(err)
		}
		if *o.IPMasq != tc.ipMasq || o.NetworkMTU != tc.mtu {
			t.Errorf("%v: ip-masq %v, network-mtu %d; want %v, %d", tc.args, *o.IPMasq, o.NetworkMTU, tc.ipMasq, tc.mtu)
		}
	}
}

// TestExampleConfig checks that deploy/config/config.yaml, with its
// commented-out settings uncommented, is a valid config file naming only
// keys cri-compose accepts, and that it names all of them.
func TestExampleConfig(t *testing.T) {
	b, err := os.ReadFile("../../deploy/config/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inSetting := false
	for line := range strings.SplitSeq(string(b), "\n") {
		// "#key: value" is a setting, and so are the "#  nested: value"
		// lines right after one; "# text" is prose.
		s, commented := strings.CutPrefix(line, "#")
		switch {
		case !commented:
			inSetting = false
		case s != "" && s[0] != ' ' && s[0] != '#':
			line, inSetting = s, true
		case inSetting && strings.HasPrefix(s, "  "):
			line = s
		default:
			inSetting = false
			continue
		}
		out = append(out, line)
	}
	var fc fileConfig
	if err := yaml.UnmarshalStrict([]byte(strings.Join(out, "\n")), &fc); err != nil {
		t.Fatalf("deploy/config/config.yaml, uncommented: %v", err)
	}
	v := reflect.ValueOf(fc)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("deploy/config/config.yaml has no example for %s", v.Type().Field(i).Tag.Get("json"))
		}
	}
}
