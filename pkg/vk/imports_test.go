package vk

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSpeaksOnlyCRI keeps vk-cri independent of the runtime it usually
// drives: nothing of cri-compose's own packages may be linked into it.
func TestSpeaksOnlyCRI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".", "../../cmd/vk-cri").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	banned := []string{
		"github.com/cri-compose/cri-compose/pkg/cri",
		"github.com/cri-compose/cri-compose/pkg/sandbox",
		"github.com/cri-compose/cri-compose/pkg/dockerapi",
		"github.com/moby/moby/", // the Docker Engine API
		"github.com/docker/docker/",
	}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		n++
		for _, b := range banned {
			if p == b || strings.HasPrefix(p, strings.TrimSuffix(b, "/")+"/") {
				t.Errorf("vk-cri depends on %s", p)
			}
		}
	}
	if n < 100 {
		t.Errorf("go list named only %d packages", n)
	}
}
