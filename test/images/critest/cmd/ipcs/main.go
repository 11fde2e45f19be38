// Command ipcs shows the System V IPC objects of the caller's IPC namespace
// in the format of util-linux's ipcs, for the critest busybox image: Debian's
// busybox-static has no ipcs applet, and critest's HostIpc specs run
// `ipcs -m` in a container to see whether a shared memory segment made on
// the host is visible there.
//
// Usage: ipcs [-m] [-q] [-s] [-a]
//
// It reads /proc/sysvipc/{shm,msg,sem}; -m shows shared memory segments,
// -q message queues, -s semaphore arrays, and -a (the default) all three.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	fs := flag.NewFlagSet("ipcs", flag.ContinueOnError)
	shm := fs.Bool("m", false, "shared memory segments")
	msg := fs.Bool("q", false, "message queues")
	sem := fs.Bool("s", false, "semaphore arrays")
	all := fs.Bool("a", false, "all of them (the default)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: ipcs [-m] [-q] [-s] [-a]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() > 0 {
		if err == nil {
			fs.Usage()
		}
		os.Exit(1)
	}
	if *all || !(*shm || *msg || *sem) {
		*shm, *msg, *sem = true, true, true
	}
	users := loadUsers("/etc/passwd")
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	failed := false
	show := func(on bool, kind, path string, print func(io.Writer, []map[string]string)) {
		if !on {
			return
		}
		rows, err := readTable(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "ipcs: %s: %v\n", kind, err)
			failed = true
			return
		}
		print(w, rows)
	}
	show(*msg, "message queues", "/proc/sysvipc/msg", func(w io.Writer, rows []map[string]string) {
		fmt.Fprintf(w, "\n------ Message Queues --------\n")
		fmt.Fprintf(w, "%-10s %-10s %-10s %-10s %-12s %-12s\n", "key", "msqid", "owner", "perms", "used-bytes", "messages")
		for _, r := range rows {
			fmt.Fprintf(w, "%-10s %-10s %-10s %-10s %-12s %-12s\n",
				key(r["key"]), r["msqid"], users.name(r["uid"]), perms(r["perms"]), r["cbytes"], r["qnum"])
		}
		fmt.Fprintln(w)
	})
	show(*shm, "shared memory", "/proc/sysvipc/shm", func(w io.Writer, rows []map[string]string) {
		fmt.Fprintf(w, "\n------ Shared Memory Segments --------\n")
		fmt.Fprintf(w, "%-10s %-10s %-10s %-10s %-10s %-10s %-12s\n", "key", "shmid", "owner", "perms", "bytes", "nattch", "status")
		for _, r := range rows {
			fmt.Fprintf(w, "%-10s %-10s %-10s %-10s %-10s %-10s %-12s\n",
				key(r["key"]), r["shmid"], users.name(r["uid"]), perms(r["perms"]), r["size"], r["nattch"], shmStatus(r["perms"]))
		}
		fmt.Fprintln(w)
	})
	show(*sem, "semaphores", "/proc/sysvipc/sem", func(w io.Writer, rows []map[string]string) {
		fmt.Fprintf(w, "\n------ Semaphore Arrays --------\n")
		fmt.Fprintf(w, "%-10s %-10s %-10s %-10s %-10s\n", "key", "semid", "owner", "perms", "nsems")
		for _, r := range rows {
			fmt.Fprintf(w, "%-10s %-10s %-10s %-10s %-10s\n",
				key(r["key"]), r["semid"], users.name(r["uid"]), perms(r["perms"]), r["nsems"])
		}
		fmt.Fprintln(w)
	})
	if failed {
		w.Flush()
		os.Exit(1)
	}
}

// readTable reads a /proc/sysvipc file: a header line of column names, then
// one line of values per object.
func readTable(path string) ([]map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) == 0 {
		return nil, nil
	}
	header := strings.Fields(lines[0])
	var rows []map[string]string
	for _, line := range lines[1:] {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		row := map[string]string{}
		for i, name := range header {
			if i < len(fields) {
				row[name] = fields[i]
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// key formats a key as ipcs does: 0x and eight hex digits. /proc gives it
// in decimal, possibly negative (a signed int).
func key(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	return fmt.Sprintf("0x%08x", uint32(n))
}

// perms shows the permission bits, without the state bits. /proc gives the
// mode in octal.
func perms(s string) string {
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return s
	}
	return strconv.FormatUint(n&0o777, 8)
}

// shmStatus reads SHM_DEST (01000) and SHM_LOCKED (02000) from the mode.
func shmStatus(s string) string {
	n, _ := strconv.ParseUint(s, 8, 32)
	var st []string
	if n&0o1000 != 0 {
		st = append(st, "dest")
	}
	if n&0o2000 != 0 {
		st = append(st, "locked")
	}
	return strings.Join(st, " ")
}

// userTable maps uids to the names of /etc/passwd.
type userTable map[string]string

func loadUsers(path string) userTable {
	t := userTable{}
	b, err := os.ReadFile(path)
	if err != nil {
		return t
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) > 2 && f[0] != "" {
			if _, dup := t[f[2]]; !dup {
				t[f[2]] = f[0]
			}
		}
	}
	return t
}

func (t userTable) name(uid string) string {
	if n, ok := t[uid]; ok {
		return n
	}
	return uid
}
