package critest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cri-compose/cri-compose/pkg/imagebuild"
)

// Shell is a busybox whose sh looks commands up in PATH, with the shared
// libraries it needs, to be the images' /bin/sh.
//
// Debian's busybox-static is built with FEATURE_SH_STANDALONE: its sh runs
// applets such as ls in process instead of executing /bin/ls, so critest's
// MaskedPaths spec, which masks /bin/ls and expects `/bin/sh -c ls` to fail
// with "/bin/sh: ls: Permission denied", cannot pass with it. Debian's
// dynamically linked busybox (package busybox) is built without it, like the
// upstream image's.
type Shell struct {
	Busybox []byte
	Libs    []imagebuild.File // the ELF interpreter and libraries, at their host paths
}

// LoadShell reads the busybox at path and, with ldd, the shared libraries
// it loads.
func LoadShell(path string) (*Shell, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("critest shell: %w", err)
	}
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("critest shell: ldd %s: %w", path, err)
	}
	sh := &Shell{Busybox: bin}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)", or the
		// interpreter: "/lib64/ld-linux-x86-64.so.2 (0x…)"; vdso has no file.
		f := strings.Fields(line)
		var lib string
		switch {
		case len(f) >= 3 && f[1] == "=>" && filepath.IsAbs(f[2]):
			lib = f[2]
		case len(f) >= 1 && filepath.IsAbs(f[0]):
			lib = f[0]
		default:
			continue
		}
		if seen[lib] {
			continue
		}
		seen[lib] = true
		data, err := os.ReadFile(lib) // through symbolic links: a regular file in the image
		if err != nil {
			return nil, fmt.Errorf("critest shell: %w", err)
		}
		sh.Libs = append(sh.Libs, imagebuild.File{Path: lib, Mode: 0o755, Data: data})
	}
	if len(sh.Libs) == 0 {
		return nil, fmt.Errorf("critest shell: ldd names no library of %s (a static busybox cannot be the shell)", path)
	}
	return sh, nil
}

// shellPath is where the image keeps the shell's busybox; sh and ash are
// hard links to it.
const shellPath = "/bin/busybox-sh"

// install replaces the hard links /bin/sh and /bin/ash of files with links to
// the shell's busybox, and adds it and its libraries.
func (sh *Shell) install(files []imagebuild.File) []imagebuild.File {
	if sh == nil {
		return files
	}
	out := make([]imagebuild.File, 0, len(files)+len(sh.Libs)+1)
	for _, f := range files {
		if f.Path != "/bin/sh" && f.Path != "/bin/ash" {
			out = append(out, f)
		}
	}
	out = append(out,
		imagebuild.File{Path: shellPath, Mode: 0o755, Data: sh.Busybox},
		imagebuild.File{Path: "/bin/sh", Hardlink: shellPath},
		imagebuild.File{Path: "/bin/ash", Hardlink: shellPath},
	)
	return append(out, sh.Libs...)
}
