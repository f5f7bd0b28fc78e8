// Command mockllm serves an OpenAI-compatible simulated LLM server (package
// sim): batch slots with a FIFO queue, prefill and decode latency, a prefix
// KV cache, vLLM metrics and fault injection. The command itself is package
// sim/mockllm, which the triage binary also runs when called as mockllm.
//
//	mockllm --preset slow --listen 127.0.0.1:8001 --name slow-0
package main

import (
	"os"

	"github.com/triage-gw/triage/sim/mockllm"
)

func main() {
	os.Exit(mockllm.Main(os.Args[1:]))
}
