package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/bench/stats"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"millis below 10", Millis(3.14159), "3.14 ms"},
		{"millis from 10", Millis(123.4), "123 ms"},
		{"millis NaN", Millis(math.NaN()), "n/a"},
		{"p50 / p99", P50P99(stats.Summary{P50: 1.5, P99: 40}), "1.50 ms / 40 ms"},
		{"number", Number(1.23456, 3), "1.235"},
		{"number NaN", Number(math.NaN(), 2), "—"},
		{"verdict met", Verdict(true), "met"},
		{"verdict missed", Verdict(false), "missed"},
		{"counts sorted by key", Counts(map[string]int{"429": 3, "200": 5, "error": 1}), "200: 5, 429: 3, error: 1"},
		{"no counts", Counts(nil), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.got)
		})
	}
}

func TestFiniteKeepsJSONWritable(t *testing.T) {
	b, err := json.Marshal(map[string]any{"nan": Finite(math.NaN()), "inf": Finite(math.Inf(1)), "x": Finite(1.5)})
	require.NoError(t, err)
	require.JSONEq(t, `{"nan":null,"inf":null,"x":1.5}`, string(b))
}

func TestWriteScenarios(t *testing.T) {
	var b strings.Builder
	WriteScenarios(&b, []Scenario{
		{Name: "a", Title: "first", Summary: []Metric{{Name: "m1", Value: "1", Target: "t"}, {Name: "m2", Value: "2"}}, Detail: "details of a\n"},
		{Name: "b", Title: "second", Detail: "details of b\n"},
	})
	require.Equal(t, "| scenario | metric | value | target / baseline |\n|---|---|---|---|\n"+
		"| a | m1 | 1 | t |\n| a | m2 | 2 |  |\n"+
		"\n## a — first\n\ndetails of a\n"+
		"\n## b — second\n\ndetails of b\n", b.String())
}

func TestWriteFilesAndJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	js, err := JSON(map[string]int{"a": 1})
	require.NoError(t, err)
	require.Equal(t, "{\n  \"a\": 1\n}\n", string(js))
	require.NoError(t, WriteFiles(dir, map[string][]byte{"results.json": js, "table.md": []byte("# t\n")}))
	got, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.Equal(t, js, got)
	got, err = os.ReadFile(filepath.Join(dir, "table.md"))
	require.NoError(t, err)
	require.Equal(t, "# t\n", string(got))
}

func TestMachineString(t *testing.T) {
	m := Machine{CPUs: 2, CPUModel: "cpu", GoVersion: "go1", OS: "linux/amd64", LoadAvg: "1 2 3", Date: "today"}
	require.Equal(t, "2 CPUs (nproc), cpu, go1, linux/amd64, load average at start 1 2 3, today", m.String())
	d := DescribeMachine()
	require.Positive(t, d.CPUs)
	require.NotEmpty(t, d.GoVersion)
	require.NotEmpty(t, d.CPUModel)
}
