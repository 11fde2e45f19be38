package doctor_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cri-compose/cri-compose/pkg/doctor"
	"github.com/cri-compose/cri-compose/test/images"
)

// TestDoctorOnThisHost runs the doctor against the real engine and checks
// that its report names exactly the capabilities this process's bounding
// set lacks (read here independently of pkg/cri), and what follows from
// them for oom_score_adj and privileged containers. On this workplace's
// machines CAP_SYS_RESOURCE is missing.
func TestDoctorOnThisHost(t *testing.T) {
	d := images.Engine(t) // skips (fails in CI) without an engine
	if !d.IsLocal() {
		t.Skipf("the engine (%s) is not local: its host's capabilities are not read", d.Host())
	}
	missing := missingCapabilities(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := doctor.Evaluate(doctor.Gather(ctx, doctor.Config{
		StateDir: filepath.Join(dir, "state"),
		Listen:   "unix://" + filepath.Join(dir, "cri.sock"),
	}))
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("cri-compose doctor on this host (bounding set lacks %v):\n%s", missing, table.String())

	get := func(name string) doctor.Check {
		c, ok := r.Get(name)
		if !ok {
			t.Fatalf("no %q check", name)
		}
		return c
	}
	if c := get(doctor.CheckEngine); c.Status != doctor.OK {
		t.Errorf("engine: %s %s", c.Status, c.Detail)
	}
	caps, oom, priv := get(doctor.CheckCapabilities), get(doctor.CheckOOMScoreAdj), get(doctor.CheckPrivileged)
	if len(missing) == 0 {
		for _, c := range []doctor.Check{caps, oom, priv} {
			if c.Status != doctor.OK {
				t.Errorf("%s: %s (%s), want ok: the bounding set is full", c.Name, c.Status, c.Detail)
			}
		}
	} else {
		for _, c := range []doctor.Check{caps, priv} {
			if c.Status != doctor.Degraded {
				t.Errorf("%s: %s, want degraded", c.Name, c.Status)
			}
			for _, m := range missing {
				if !strings.Contains(c.Detail, m) {
					t.Errorf("%s: %q does not name the missing %s", c.Name, c.Detail, m)
				}
			}
		}
		// Names outside the missing set must not be reported missing.
		listed := caps.Detail[strings.Index(caps.Detail, ": ")+2:]
		if got := strings.Split(listed, ", "); strings.Join(got, " ") != strings.Join(missing, " ") {
			t.Errorf("capabilities reported missing: %v, want %v", got, missing)
		}
	}
	sysResourceMissing := strings.Contains(" "+strings.Join(missing, " ")+" ", " CAP_SYS_RESOURCE ")
	switch {
	case sysResourceMissing && (oom.Status != doctor.Degraded || !strings.Contains(oom.Detail, "CAP_SYS_RESOURCE")):
		t.Errorf("%s: %s %q, want degraded naming CAP_SYS_RESOURCE", oom.Name, oom.Status, oom.Detail)
	case !sysResourceMissing && oom.Status != doctor.OK:
		t.Errorf("%s: %s %q, want ok", oom.Name, oom.Status, oom.Detail)
	}
	// A fresh state dir is created on start; the socket is not served.
	if c := get(doctor.CheckStateDir); c.Status != doctor.OK {
		t.Errorf("state dir: %s %s", c.Status, c.Detail)
	}
	if c := get(doctor.CheckSocket); c.Status != doctor.Degraded || !strings.Contains(c.Detail, "not running") {
		t.Errorf("cri socket: %s %s, want degraded: not running", c.Status, c.Detail)
	}
	if c := get(doctor.CheckClock); c.Status != doctor.OK {
		t.Errorf("clock skew against a local engine: %s %s", c.Status, c.Detail)
	}
	// Cluster networking warns at worst; ip forwarding as /proc says.
	for _, name := range []string{doctor.CheckBridgeNF, doctor.CheckBridgeNF6, doctor.CheckIPForward, doctor.CheckRouteLocalnet} {
		if c := get(name); c.Status == doctor.Fail {
			t.Errorf("%s: %s %s, want ok or degraded", name, c.Status, c.Detail)
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil {
		want := doctor.Degraded
		if strings.TrimSpace(string(b)) == "1" {
			want = doctor.OK
		}
		if c := get(doctor.CheckIPForward); c.Status != want {
			t.Errorf("ip forwarding %q here: %s %s, want %s", strings.TrimSpace(string(b)), c.Status, c.Detail, want)
		}
	}
	if r.Failed() {
		t.Errorf("the report fails on a host that runs cri-compose's tests")
	}
}

// missingCapabilities reads CapBnd of /proc/self/status and names the
// capabilities up to cap_last_cap that it lacks.
func missingCapabilities(t *testing.T) []string {
	names := []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
		"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
		"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
		"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT",
		"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
		"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
		"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
		"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
	}
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Skip(err)
	}
	last, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			bnd, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for bit := 0; bit <= last && bit < len(names); bit++ {
				if bnd&(1<<bit) == 0 {
					out = append(out, names[bit])
				}
			}
			return out
		}
	}
	t.Skip("no CapBnd in /proc/self/status")
	return nil
}
