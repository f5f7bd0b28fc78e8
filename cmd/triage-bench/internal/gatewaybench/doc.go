// Package gatewaybench is "triage-bench gateway": it starts bin/triage as a child process
// (package gatewayproc) and runs the gateway scenarios against it (seq-miss, conc-miss,
// conc-hit with the hello baseline, overload, query-process, proxy-cost, fail-open), then
// writes their report. It also serves "triage-bench hello", the bare net/http baseline.
//
// Every run is bounded in time and request count and stays on 127.0.0.1. The scenarios run
// one after another; each owns the load goroutines it starts and waits for them, and the
// gateway is waited idle between scenarios.
package gatewaybench
