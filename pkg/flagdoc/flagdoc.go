// Package flagdoc writes the flag tables of docs/configuration.md from a
// binary's flag.FlagSet, and keeps each binary's part of that file in a
// section of its own between two marker comments, so that cri-compose and
// vk-cri each regenerate (and their tests check) only their part.
package flagdoc

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// Column is an extra column of a flag table: its heading and the cell of
// each flag (a config file key, say; "" leaves the cell empty).
type Column struct {
	Heading string
	Cell    func(name string) string
}

// Table writes a markdown table of the flags of fs that include accepts, in
// name order: flag, the extra columns, default and description.
func Table(b *strings.Builder, fs *flag.FlagSet, include func(name string) bool, extra ...Column) {
	b.WriteString("| Flag |")
	rule := "|---|"
	for _, c := range extra {
		b.WriteString(" " + c.Heading + " |")
		rule += "---|"
	}
	b.WriteString(" Default | Description |\n" + rule + "---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		if !include(f.Name) {
			return
		}
		fmt.Fprintf(b, "| `--%s` |", f.Name)
		for _, c := range extra {
			cell := ""
			if v := c.Cell(f.Name); v != "" {
				cell = "`" + v + "`"
			}
			b.WriteString(" " + cell + " |")
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(b, " %s | %s |\n", def, Cell(f.Usage))
	})
}

// Cell escapes s for one markdown table cell.
func Cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func markers(name string) (begin, end string) {
	return "<!-- BEGIN GENERATED " + name + " ", "<!-- END GENERATED " + name + " -->"
}

// Section is body wrapped in the markers of section name; note goes into
// the opening marker (who generates it, how).
func Section(name, note, body string) string {
	begin, end := markers(name)
	return begin + note + " -->\n" + body + end + "\n"
}

// Find returns section name of doc, markers included, and whether doc has it.
func Find(doc, name string) (string, bool) {
	begin, end := markers(name)
	i := strings.Index(doc, begin)
	if i < 0 {
		return "", false
	}
	j := strings.Index(doc[i:], end)
	if j < 0 {
		return "", false
	}
	k := i + j + len(end)
	if k < len(doc) && doc[k] == '\n' {
		k++
	}
	return doc[i:k], true
}

// Splice returns doc with its section name replaced by section (as Section
// made it), or with section appended when doc has none yet.
func Splice(doc, name, section string) string {
	if old, ok := Find(doc, name); ok {
		return strings.Replace(doc, old, section, 1)
	}
	if doc != "" && !strings.HasSuffix(doc, "\n\n") {
		doc = strings.TrimRight(doc, "\n") + "\n\n"
	}
	return doc + section
}

// UpdateFile splices section name into the file at path (made with just
// section if it does not exist).
func UpdateFile(path, name, section string) error {
	doc, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, []byte(Splice(string(doc), name, section)), 0o644)
}

// Current reports whether the file at path holds section name exactly as
// section, with the command that regenerates it in the error.
func Current(path, name, section, regenerate string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	have, ok := Find(string(doc), name)
	if !ok {
		return fmt.Errorf("%s has no section %q: run %s", path, name, regenerate)
	}
	if have != section {
		return fmt.Errorf("the %s section of %s is out of date with the flags: run %s", name, path, regenerate)
	}
	return nil
}

// Sync is what a binary's reference test does: rewrite its section of the
// file at path when update is set (go test -update), else fail when the
// section is not current (make docs regenerates it).
func Sync(path, name, section string, update bool) error {
	if update {
		return UpdateFile(path, name, section)
	}
	return Current(path, name, section, "`make docs`")
}
