// Command triage-bench is Triage's load generator and policy evaluation.
//
//	triage-bench policies [flags]   replica-policy sweep on simulated replicas (no gateway needed)
//	triage-bench gateway [flags]    gateway benchmarks against a bin/triage subprocess
//	triage-bench fleet [flags]      fleet mode: gateways, Redis and replicas as processes
//	triage-bench vllm-prefix [flags] replica policies on two real vLLM engines (prefix caching, KV events)
//	triage-bench hello [flags]      bare net/http hello-world server, the HTTP baseline
//	triage-bench revproxy [flags]   Go's httputil.ReverseProxy, the plain-proxy baseline
//
// Every run is bounded in time and request count, and all traffic stays on
// 127.0.0.1. Run a subcommand with -h for its flags.
//
// This command only dispatches: each program is a package of its own under
// internal/ (gatewaybench: the gateway benchmarks and the hello baseline; sweep:
// the replica-policy sweep; drills: fleet mode; vllmprefix: the policies on real vLLM), which parses its flags, runs
// its scenarios and writes their output. The gateway child process is
// internal/gatewayproc's; every child process is started and stopped by the
// repository's internal/childproc. The load generator, statistics, traces,
// SSE timing and report helpers they use are the packages under bench/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/triage-gw/triage/cmd/triage-bench/internal/drills"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/gatewaybench"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/sweep"
	"github.com/triage-gw/triage/cmd/triage-bench/internal/vllmprefix"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "triage-bench:", err)
		os.Exit(1)
	}
}

const usage = `Usage: triage-bench <command> [flags]

Commands:
  policies   replay a seeded multi-turn Dolly chat trace against simulated
             replicas once per replica policy (identical replicas, or with
             --scenario heterogeneous one slower and one with half the cache);
             report TTFT, E2E, SLO attainment, prefix-cache hit rate,
             per-replica load and Jain's index
  gateway    start bin/triage as a subprocess and run the gateway scenarios
             (seq-miss, conc-miss, conc-hit, overload, query-process, proxy-cost;
             fail-open and side-by-side when named)
  fleet      start redis-server, mockllm replicas and 1 or 3 gateways as processes
             and measure fleet mode against one gateway: shared slow slots,
             result-cache hit rate, prefix affinity, added latency, and the
             kill -9 and Redis outage drills
  vllm-prefix
             start two vLLM engines (tiny-llama, small KV caches) and replay a
             multi-turn chat trace through the gateway once per policy
             (round-robin, least-request, prefix-cache and lmetric-sticky, the
             last two guessed and fed by KV events); report the engines' own
             prefix-cache hit ratio, TTFT, and how often the gateway's predicted
             cached prefix agreed with the engine's cached_tokens
  hello      serve a bare net/http hello world (the HTTP baseline of conc-hit)
  revproxy   serve Go's httputil.ReverseProxy in front of one URL (the
             plain-proxy baseline of side-by-side)

Run "triage-bench <command> -h" for a command's flags and defaults.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "policies":
		return sweep.Run(ctx, args[1:], stdout, stderr)
	case "gateway":
		return gatewaybench.Run(ctx, args[1:], stdout, stderr)
	case "fleet":
		return drills.Run(ctx, args[1:], stdout, stderr)
	case "vllm-prefix":
		return vllmprefix.Run(ctx, args[1:], stdout, stderr)
	case "hello":
		return gatewaybench.RunHello(ctx, args[1:], stderr)
	case "revproxy":
		return gatewaybench.RunRevProxy(ctx, args[1:], stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
