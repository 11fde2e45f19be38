package cricomposev1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent runs `make proto-check` (hack/proto.sh
// --check): buf lint, and the committed *.pb.go must be exactly what the
// pinned generators make of the .proto files. The first run on a machine
// builds the generators (a minute or two); later runs reuse the build cache.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the generators are not built")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to run hack/proto.sh")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "hack", "proto.sh"), "--check")
	cmd.Dir = root
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/proto.sh --check: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
