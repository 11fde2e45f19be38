package flagdoc

import (
	"flag"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("b-flag", "x", "has a | pipe\nand a line")
	fs.Bool("a-flag", false, "first")
	fs.String("hidden", "", "left out")
	var b strings.Builder
	Table(&b, fs, func(n string) bool { return n != "hidden" },
		Column{"Key", func(n string) string { return map[string]string{"a-flag": "aFlag"}[n] }})
	want := "| Flag | Key | Default | Description |\n|---|---|---|---|\n" +
		"| `--a-flag` | `aFlag` | `false` | first |\n" +
		"| `--b-flag` |  | `x` | has a \\| pipe and a line |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestSplice(t *testing.T) {
	one := Section("one", "by one", "body 1\n")
	two := Section("two", "by two", "body 2\n")
	doc := Splice("# Title\n", "one", one)
	doc = Splice(doc, "two", two)
	want := "# Title\n\n" + one + "\n" + two
	if doc != want {
		t.Fatalf("appended: got %q, want %q", doc, want)
	}
	doc = Splice(doc, "one", Section("one", "by one", "new body\n"))
	if got, ok := Find(doc, "one"); !ok || !strings.Contains(got, "new body\n") || strings.Contains(doc, "body 1") {
		t.Errorf("replaced: %q", doc)
	}
	if got, ok := Find(doc, "two"); !ok || got != two {
		t.Errorf("the other section changed: %q", got)
	}
	if _, ok := Find(doc, "three"); ok {
		t.Error("found a section that is not there")
	}
}
