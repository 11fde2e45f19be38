package main

//go:generate go run . config-reference ../../docs/configuration.md

import (
	"errors"
	"flag"
	"maps"
	"os"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/flagdoc"
)

// referenceSection names vk-cri's part of docs/configuration.md.
const referenceSection = "vk-cri"

// configReference is vk-cri's section of docs/configuration.md, from the
// flag definitions (newFlags): main_test.go fails when the file differs.
func configReference() string {
	var o options
	fs := newFlags("vk-cri", &o)
	logging := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(logging)

	var b strings.Builder
	b.WriteString(`## vk-cri

vk-cri takes its settings from flags only (` + "`make install`" + ` puts an example
` + "`/etc/vk-cri/vk-cri.env`" + ` for its systemd unit,
[deploy/config/vk-cri.env](../deploy/config/vk-cri.env)). Where kubelet
has the same setting, the flag has kubelet's name. Flags take
one or two dashes; klog's logging flags are those of cri-compose above.

### Flags

`)
	flagdoc.Table(&b, fs, func(name string) bool {
		_, alias := deprecatedAliases[name]
		return logging.Lookup(name) == nil && !alias
	})
	b.WriteString(`
### Deprecated aliases

vk-cri's first names of flags that kubelet names otherwise. They still
work, set the same value, and are logged as deprecated when used.

| Alias | Use |
|---|---|
`)
	for _, alias := range slices.Sorted(maps.Keys(deprecatedAliases)) {
		b.WriteString("| `--" + alias + "` | `--" + deprecatedAliases[alias] + "` |\n")
	}
	return flagdoc.Section(referenceSection,
		`from the flags of cmd/vk-cri/flags.go by "vk-cri config-reference" (make docs); do not edit: go test ./cmd/vk-cri fails when it differs`,
		b.String())
}

// runConfigReference prints vk-cri's section of docs/configuration.md, or
// updates it in the file named (go generate).
func runConfigReference(args []string) error {
	switch len(args) {
	case 0:
		_, err := os.Stdout.WriteString(configReference())
		return err
	case 1:
		return flagdoc.UpdateFile(args[0], referenceSection, configReference())
	}
	return errors.New("usage: vk-cri config-reference [docs/configuration.md]")
}
