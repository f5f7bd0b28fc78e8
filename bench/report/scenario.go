package report

import (
	"fmt"
	"strings"
)

// Scenario is one scenario's outcome: a few summary metrics for the table
// at the top of a report, and details below it.
type Scenario struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Summary []Metric `json:"summary"`
	Detail  string   `json:"-"` // markdown
	Data    any      `json:"data"`
	Wall    float64  `json:"wall_s"`
}

// Metric is one line of the summary table.
type Metric struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Target string `json:"target,omitempty"` // the target or the baseline beside it
}

// WriteScenarios renders the summary table of every scenario's metrics,
// then each scenario's details under a heading of its own.
func WriteScenarios(b *strings.Builder, scenarios []Scenario) {
	b.WriteString("| scenario | metric | value | target / baseline |\n|---|---|---|---|\n")
	for _, s := range scenarios {
		for _, m := range s.Summary {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", s.Name, m.Name, m.Value, m.Target)
		}
	}
	for _, s := range scenarios {
		fmt.Fprintf(b, "\n## %s — %s\n\n%s", s.Name, s.Title, s.Detail)
	}
}
