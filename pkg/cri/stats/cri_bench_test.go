package stats

import (
	"fmt"
	"testing"
	"time"

	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkContainerStats100 builds the stats of 100 running containers
// with fresh samples in memory (no engine, no cgroup reads), as
// ListContainerStats does.
func BenchmarkContainerStats100(b *testing.B) {
	c := New(nil, nil, Options{})
	now := time.Now()
	c.lastPass = now
	var ctrs []Container
	for i := range 100 {
		id := fmt.Sprintf("%064d", i)
		ctrs = append(ctrs, Container{ID: id, Pid: 1000 + i, State: runtime.ContainerState_CONTAINER_RUNNING,
			Config: &runtime.ContainerConfig{Metadata: &runtime.ContainerMetadata{Name: fmt.Sprintf("c%d", i)}}})
		c.local[id] = usageSample{at: now.UnixNano(), cpu: 1e9, nanoCores: 1e6, hasRate: true,
			mem: memUsage{usage: 1 << 20, workingSet: 1 << 20, rss: 1 << 19}}
		c.layers.sizes[id] = layerUsage{at: now.UnixNano(), bytes: 4096, inodes: 3, hasInodes: true}
	}
	b.ReportAllocs()
	for b.Loop() {
		c.lastPass = time.Now() // fresh: answered from memory
		c.Fresh()
		for _, ct := range ctrs {
			if st := c.ContainerStats(ct); st.GetCpu() == nil {
				b.Fatal("no CPU sample")
			}
		}
	}
}
