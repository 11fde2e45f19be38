// Command logspam writes numbered lines to stdout and stderr as fast as it
// can, for tests and benchmarks of log paths: every line can be checked
// for loss, order and damage at the other end.
//
// Each line is "<seq> <size> <filler>", size bytes long without its '\n',
// the filler a repeated letter that depends on seq. Line sizes cycle
// through -sizes. With -stamp, the filler starts with the time of the
// write in nanoseconds (for latency). With -burst, it pauses after every
// burst of lines, once -fill bytes are written. Lines go to stdout and stderr in
// turn, numbered per stream. At the end it writes -end to stdout without a
// newline, and exits 0.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	total := flag.Int64("bytes", 1<<20, "stop after about this many bytes")
	sizes := flag.String("sizes", "100", "comma-separated line sizes, cycled")
	burst := flag.Int("burst", 0, "lines per burst; 0: no pauses")
	fill := flag.Int64("fill", 0, "bytes written at full speed before the bursts begin")
	pause := flag.Duration("pause", 10*time.Millisecond, "pause after each burst")
	stamp := flag.Bool("stamp", false, "start each filler with the write time in ns")
	buffer := flag.Int("buffer", 32*1024, "write buffer per stream; 0: one write per line")
	end := flag.String("end", "", "written last to stdout, without a newline")
	flag.Parse()

	var ns []int
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 40 {
			fmt.Fprintf(os.Stderr, "logspam: bad size %q (at least 40)\n", f)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	outs := []*bufio.Writer{bufio.NewWriterSize(os.Stdout, max(*buffer, 1)), bufio.NewWriterSize(os.Stderr, max(*buffer, 1))}
	seq := []int{0, 0}
	var written int64
	line := make([]byte, 0, 64*1024)
	for i := 0; written < *total; i++ {
		s := i % 2
		seq[s]++
		size := ns[(i/2)%len(ns)]
		line = Line(line[:0], seq[s], size, *stamp)
		outs[s].Write(line)
		if *buffer == 0 {
			outs[s].Flush()
		}
		written += int64(len(line))
		if *burst > 0 && written >= *fill && (i+1)%*burst == 0 {
			outs[0].Flush()
			outs[1].Flush()
			time.Sleep(*pause)
		}
	}
	outs[0].Flush()
	outs[1].Flush()
	os.Stdout.WriteString(*end)
}

// Line appends line seq of size bytes, and its '\n', to b.
func Line(b []byte, seq, size int, stamp bool) []byte {
	start := len(b)
	b = strconv.AppendInt(b, int64(seq), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(size), 10)
	b = append(b, ' ')
	if stamp {
		b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
		b = append(b, ' ')
	}
	fill := byte('a' + seq%26)
	for len(b)-start < size {
		b = append(b, fill)
	}
	return append(b, '\n')
}
