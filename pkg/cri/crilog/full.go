package crilog

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// A log file whose filesystem is full drops the records that do not fit,
// counts them (Counters.DroppedLines), and writes again as soon as there is
// room, as containerd's CRI plugin does. Holding them instead would hold
// the container too, as the pump pushes back on a container whose output
// it has not written (the attach gate, Gate), so a full log disk would
// stop every workload on the node; and lines held until the disk has room
// would fill it again at once. One log line says the file's filesystem is
// full, one that it takes lines again and how many were dropped: never one
// per line.

// fullDisk is a Writer's state while its filesystem is full.
type fullDisk struct {
	since   time.Time
	dropped uint64 // records dropped since
}

// isNoSpace reports a write refused for want of room: the filesystem is
// full, or the user's quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// dropForRoom drops the records of one WriteRecord call, n bytes of which
// were written (a short write) before err.
func (w *Writer) dropForRoom(records, n int, err error) {
	if n > 0 {
		w.untear(n)
	}
	w.counters.dropLines(records) // metrics.go
	if w.full == nil {
		w.full = &fullDisk{since: time.Now()}
		klog.ErrorS(err, "Container log's filesystem is full: dropping its lines until there is room", "path", w.path)
	}
	w.full.dropped += uint64(records)
}

// roomAgain ends the dropping after a write went through.
func (w *Writer) roomAgain() {
	if w.full == nil {
		return
	}
	klog.InfoS("Container log takes lines again", "path", w.path, "droppedLines", w.full.dropped,
		"after", time.Since(w.full.since).Round(time.Millisecond))
	w.full = nil
}

// untear cuts a short write off the end of the file again: a torn record
// followed by the next one would make one line of two, and a record of
// this call that did fit would be written while the rest are counted
// dropped. The file is appended to by this writer alone, under w.mu.
func (w *Writer) untear(n int) {
	fi, err := w.f.Stat()
	if err == nil && fi.Size() >= int64(n) {
		err = w.f.Truncate(fi.Size() - int64(n))
	}
	if err != nil {
		klog.ErrorS(err, "Cannot cut a torn record off a full container log", "path", w.path)
	}
}

// hasRoom reports whether the file's filesystem has a free block. While
// it has none, records are dropped without trying the write: a short one
// could still fit in the file's last block and the next not, and the log
// would flip between dropping and writing (and say so each time).
func (w *Writer) hasRoom() bool {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return true
	}
	var st unix.Statfs_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstatfs(int(fd), &st) }); err != nil || serr != nil {
		return true // let the write say
	}
	if os.Geteuid() == 0 { // root may use the blocks reserved for it
		return st.Bfree > 0
	}
	return st.Bavail > 0
}
