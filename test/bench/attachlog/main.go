// Command attachlog writes a container's output into a CRI log file
// straight from the engine's attach stream (crilog.CopyAttach, as
// cri-compose writes it), stamping each line as it arrives. It is
// BenchmarkLogs' engine-attach path: what writing the CRI log from the
// attach stream costs at least, with no CRI server around it (the engine
// still writes its own json-file log beside the stream).
//
// It attaches before the container starts (it prints "attached" once it
// has), and returns once the stream ends with the container.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/cri-compose/cri-compose/pkg/cri/crilog"
	"github.com/cri-compose/cri-compose/pkg/dockerapi"
)

func main() {
	id := flag.String("container", "", "the container")
	path := flag.String("log", "", "the CRI log file to write")
	flag.Parse()
	if err := run(*id, *path); err != nil {
		fmt.Fprintln(os.Stderr, "attachlog:", err)
		os.Exit(1)
	}
}

func run(id, path string) error {
	d, err := dockerapi.New("")
	if err != nil {
		return err
	}
	w, err := crilog.OpenWriter(path)
	if err != nil {
		return err
	}
	defer w.Close()
	st, err := d.ContainerAttach(context.Background(), id, dockerapi.AttachConfig{Stdout: true, Stderr: true})
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Println("attached")
	return crilog.CopyAttach(st.Reader, false, w)
}
