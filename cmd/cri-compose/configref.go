package main

//go:generate go run . config-reference ../../docs/configuration.md

import (
	"flag"
	"io"
	"reflect"
	"strings"

	"k8s.io/klog/v2"

	"github.com/cri-compose/cri-compose/pkg/flagdoc"
)

// referenceSection names cri-compose's part of docs/configuration.md;
// vk-cri keeps its own part there.
const referenceSection = "cri-compose"

// configReference is cri-compose's section of docs/configuration.md, from
// the flag definitions (newFlags) and fileConfig's tags, so the reference
// cannot drift from the code: docs_test.go fails when the file differs.
func configReference() string {
	var o options
	fs := newFlags("cri-compose", &o)
	logging := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(logging)
	keys := fileKeys()
	key := flagdoc.Column{Heading: "Config file key", Cell: func(name string) string { return keys[name] }}

	var b strings.Builder
	b.WriteString(`## cri-compose

cri-compose takes its settings from flags and, with ` + "`--config FILE`" + `, from a
YAML file; a flag given on the command line wins over the file. An example
file with every key, commented, is [deploy/config/config.yaml](../deploy/config/config.yaml)
(` + "`make install`" + ` puts it at /etc/cri-compose/config.yaml).

Flags take one or two dashes (` + "`-listen`" + ` or ` + "`--listen`" + `).

### Flags

`)
	flagdoc.Table(&b, fs, func(name string) bool { return logging.Lookup(name) == nil }, key)
	b.WriteString(`
` + "`registryMirrors`" + ` in the file maps a registry host to its mirror endpoints,
tried in order before the registry itself:

` + "```yaml" + `
registryMirrors:
  registry.k8s.io: ["http://127.0.0.1:5000"]
` + "```" + `

A host given with ` + "`--registry-mirror`" + ` takes the flag's endpoints instead.

### Logging flags (klog)

`)
	flagdoc.Table(&b, fs, func(name string) bool { return logging.Lookup(name) != nil }, key)
	b.WriteString(`
### Subcommands

| Command | What it does |
|---|---|
| ` + "`cri-compose doctor [flags]`" + ` | Checks the engine and the host with the settings above (same flags, same ` + "`--config`" + `) and prints one table: check, status (ok, degraded, fail), detail. Exits 1 if a check failed. |
| ` + "`cri-compose version`" + ` | Prints the version, commit, Go version and CRI API version. |
| ` + "`cri-compose export [-o DIR] [--force] POD`" + ` | Asks the running cri-compose (` + "`--runtime-endpoint`" + `, default the ` + "`--listen`" + ` default) for the pod POD (id or prefix, namespace/name, name or project) as a standalone compose project and writes DIR/compose.yaml and the files of its mounts (default DIR: ./PROJECT, the export's project name), for ` + "`docker compose up -d`" + ` on any machine. |
| ` + "`cri-compose projects [--format table\\|json]`" + ` | Lists the pods of the running cri-compose as Compose projects, with their services and states. |
`)
	return flagdoc.Section(referenceSection,
		`from the flags of cmd/cri-compose/flags.go by "cri-compose config-reference" (make docs); do not edit: go test ./cmd/cri-compose fails when it differs`,
		b.String())
}

// writeConfigReference writes cri-compose's section alone.
func writeConfigReference(w io.Writer) error {
	_, err := io.WriteString(w, configReference())
	return err
}

// fileKeys maps a flag to its config file key, from fileConfig's json and
// flag tags.
func fileKeys() map[string]string {
	m := map[string]string{}
	t := reflect.TypeFor[fileConfig]()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name := f.Tag.Get("flag"); name != "" && key != "" {
			m[name] = key
		}
	}
	return m
}
