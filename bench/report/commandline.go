package report

import (
	"fmt"
	"strings"
)

// CommandLine renders how a triage-bench run was invoked, for report headers: the
// subcommand and its arguments, each one with a space or a quote in it quoted.
func CommandLine(sub string, args []string) string {
	parts := append([]string{"triage-bench", sub}, args...)
	for i, p := range parts {
		if strings.ContainsAny(p, " \t\"'") {
			parts[i] = fmt.Sprintf("%q", p)
		}
	}
	return strings.Join(parts, " ")
}
