#!/usr/bin/env bash
# purego-packages.sh — prints the project's packages that build and test with CGO_ENABLED=0,
# one import path a line: every package of ./... whose own build and whose test build (its
# _test.go files included) reach no package that cgo alone can build (today daulet/tokenizers
# and yalue/onnxruntime_go, through classifier). `make check` tests exactly these, so a package
# joins the list by itself once it stops depending on classifier; nothing here names one.
#
#   scripts/purego-packages.sh           the pure-Go packages
#   scripts/purego-packages.sh --cgo     the others (what `make check` leaves to `make test-go`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CGO_ENABLED=0

# Packages outside the standard library left with no Go file once cgo is off: all their
# files import "C".
cgo_only=$(go list -e -deps -test -f \
	'{{if and (not .Standard) (not .GoFiles) .IgnoredGoFiles}}{{.ImportPath}}{{end}}' ./... | sort -u)

# Every package of ./... and every test variant ("p [p.test]", "p_test [p.test]", "p.test")
# with its dependencies; a variant that reaches a cgo-only package marks its base package.
needs_cgo=$(go list -e -test -f '{{.ImportPath}}|{{join .Deps " "}}' ./... |
	awk -F'|' -v bad="$cgo_only" '
		BEGIN { n = split(bad, b, "\n"); for (i = 1; i <= n; i++) if (b[i] != "") cgo[b[i]] = 1 }
		{
			m = split($2, d, " ")
			for (i = 1; i <= m; i++) if (d[i] in cgo) {
				p = $1; sub(/ \[.*\]$/, "", p); sub(/\.test$/, "", p); sub(/_test$/, "", p)
				print p; break
			}
		}' | sort -u)

all=$(go list ./... | sort -u)
if [[ "${1:-}" == "--cgo" ]]; then
	comm -12 <(echo "$all") <(echo "$needs_cgo")
else
	comm -23 <(echo "$all") <(echo "$needs_cgo")
fi
