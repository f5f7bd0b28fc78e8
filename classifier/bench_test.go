package classifier

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkStaticMemory loads the shipped model's static stage once and
// reports what it holds: Go heap and process RSS growth after a GC (MiB).
// Run it alone (-bench StaticMemory -benchtime 1x): RSS is per process.
func BenchmarkStaticMemory(b *testing.B) {
	m, err := LoadManifest(filepath.Join(repo, "models"))
	if err != nil {
		b.Fatal(err)
	}
	goruntime.GC()
	h0, r0 := heapMiB(), rssMiB(b)
	s, _, err := LoadStatic(filepath.Join(repo, "models"), m)
	if err != nil {
		b.Fatal(err)
	}
	goruntime.GC()
	b.ReportMetric(heapMiB()-h0, "heap-MiB")
	b.ReportMetric(rssMiB(b)-r0, "rss-MiB")
	goruntime.KeepAlive(s)
}

func heapMiB() float64 {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

func rssMiB(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}
