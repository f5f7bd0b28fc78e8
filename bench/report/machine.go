package report

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Machine identifies where a benchmark ran, for report headers.
type Machine struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	LoadAvg   string `json:"load_avg_at_start"` // 1, 5, 15 minutes, from /proc/loadavg
	Date      string `json:"date"`
}

// DescribeMachine reads this machine's description: CPU count and model
// (from /proc/cpuinfo, "unknown" elsewhere), Go version, OS, the load
// average at the time of the call (from /proc/loadavg) and the UTC date.
func DescribeMachine() Machine {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		CPUModel:  "unknown",
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		Date:      time.Now().UTC().Format(time.RFC3339),
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// String is the one-line form used in report headers.
func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (nproc), %s, %s, %s, load average at start %s, %s",
		m.CPUs, m.CPUModel, m.GoVersion, m.OS, m.LoadAvg, m.Date)
}
