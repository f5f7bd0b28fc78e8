// Package drills is "triage-bench fleet": it starts redis-server, mockllm replicas and one
// or three gateways as child processes (internal/childproc, gatewayproc) and measures fleet
// mode against one gateway: the shared slow slots, the shared result cache, prefix affinity
// (the sweep's trace replayed through the gateways), added latency (the gateway benchmark's
// proxy-cost measure), and the kill -9 and Redis outage drills.
//
// Every child dies with this process; each measure stops the processes it started before
// the next begins.
package drills
