// Command attachlog writes a container's output into a CRI log file
// straight from the engine's attach stream, stamping each line as it
// arrives, as containerd writes the CRI log from its shim's pipe. It is
// BenchmarkLogs' engine-attach path: what writing the CRI log from the
// attach stream costs at least, the engine's part included (the engine
// still writes its own json-file log beside the stream).
//
// It attaches before the container starts (it prints "attached" once it
// has), and returns once the stream ends with the container.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

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
	return copyFrames(st.Reader, w)
}

// copyFrames writes every whole line of each stream as a record, stamped
// when it arrived; a line the stream has not finished yet waits for its
// end, up to crilog.MaxLineSize, past which it is written in P pieces.
func copyFrames(r io.Reader, w *crilog.Writer) error {
	var hdr [8]byte
	var pending [2][]byte // stdout's, stderr's unfinished line
	buf := make([]byte, 64<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				break
			}
			return err
		}
		s, i := crilog.Stdout, 0
		if stdcopy.StdType(hdr[0]) == stdcopy.Stderr {
			s, i = crilog.Stderr, 1
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		if n > len(buf) {
			buf = make([]byte, n)
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return err
		}
		now := time.Now()
		pending[i] = append(pending[i], buf[:n]...)
		p := pending[i]
		if end := bytes.LastIndexByte(p, '\n'); end >= 0 {
			if err := w.WriteRecord(now, s, false, p[:end+1]); err != nil {
				return err
			}
			p = p[end+1:]
		}
		for len(p) >= crilog.MaxLineSize {
			if err := w.WriteRecord(now, s, true, p[:crilog.MaxLineSize]); err != nil {
				return err
			}
			p = p[crilog.MaxLineSize:]
		}
		pending[i] = append(pending[i][:0], p...) // the rest moves to the front (copy handles the overlap)
	}
	for i, p := range pending {
		if len(p) > 0 {
			s := crilog.Stdout
			if i == 1 {
				s = crilog.Stderr
			}
			if err := w.WriteRecord(time.Now(), s, true, p); err != nil {
				return err
			}
		}
	}
	return nil
}
