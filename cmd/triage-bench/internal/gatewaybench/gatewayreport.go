package gatewaybench

import (
	"fmt"
	"io"
	"strings"

	"github.com/triage-gw/triage/bench/report"
)

// GatewayReport is the gateway subcommand's output.
type GatewayReport struct {
	Command   string            `json:"command"`
	Machine   report.Machine    `json:"machine"`
	Config    *gatewayConfig    `json:"config"`
	Startup   float64           `json:"gateway_startup_s,omitempty"`
	Scenarios []report.Scenario `json:"scenarios"`
}

// Markdown renders the header, the summary table and each scenario's details.
func (r *GatewayReport) Markdown() string {
	var b strings.Builder
	b.WriteString("# Gateway benchmarks\n\n")
	fmt.Fprintf(&b, "- Command: `%s`\n", r.Command)
	fmt.Fprintf(&b, "- Machine: %s\n", r.Machine)
	cfg := "built-in defaults (simulated pools)"
	if r.Config.Config != "" {
		cfg = r.Config.Config
	}
	if r.Startup > 0 {
		fmt.Fprintf(&b, "- Gateway: `%s`, config: %s, started as a subprocess on 127.0.0.1 (ready after %.1f s). The load generator (this program, Go net/http, keep-alive) runs on the same CPUs.\n\n", r.Config.Bin, cfg, r.Startup)
	} else { // only scenarios that start gateways of their own ran
		fmt.Fprintf(&b, "- Gateway: `%s`, started as a subprocess on 127.0.0.1 by each scenario with its own config (see its section). The load generator (this program, Go net/http, keep-alive) runs on the same CPUs.\n\n", r.Config.Bin)
	}
	report.WriteScenarios(&b, r.Scenarios)
	return b.String()
}

// Write prints the markdown to stdout and, with out, writes results.json
// and table.md there.
func (r *GatewayReport) Write(stdout, stderr io.Writer, out string) error {
	return report.Publish(stdout, stderr, out, r, r.Markdown())
}
