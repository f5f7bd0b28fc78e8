package kvevents

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInteropWithLibzmq subscribes to a Python publisher built like vLLM's
// (libzmq through pyzmq, payloads through msgspec), in both encodings. It
// needs a Python with pyzmq and msgspec, named by KVEVENTS_PYTHON: the
// Makefile names the vLLM engine's own venv (make setup-vllm), whose pyzmq
// and msgspec are the ones vLLM publishes with. Without it the test fails in
// CI (CI set) and is skipped elsewhere, where the Go publishers of the other
// tests stand in.
func TestInteropWithLibzmq(t *testing.T) {
	python := os.Getenv("KVEVENTS_PYTHON")
	if _, err := os.Stat(python); python == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("KVEVENTS_PYTHON %q is not a python: make setup-vllm installs the one the Makefile names", python)
		}
		t.Skipf("KVEVENTS_PYTHON %q is not a python with pyzmq and msgspec (make setup-vllm)", python)
	}
	for _, tc := range []struct{ encoding, mode string }{
		{"map", ModeConnect}, {"array", ModeConnect}, {"map", ModeBind}, {"map", "replay"},
	} {
		t.Run(tc.encoding+"/"+tc.mode, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			addr := ln.Addr().String()
			ln.Close()
			args := []string{"testdata/vllm_publisher.py", "tcp://" + addr, tc.encoding}
			cfg := Config{Endpoint: "tcp://" + addr, Topic: "kv-events"}
			if tc.mode == "replay" { // batch 1 only comes through the replay socket
				rl, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				cfg.ReplayEndpoint = "tcp://" + rl.Addr().String()
				rl.Close()
				args = append(args, "replay="+cfg.ReplayEndpoint)
			}
			var s *testSub
			if tc.mode == ModeBind { // the subscriber listens first, the publisher connects
				s = newTestSub(t, Config{Endpoint: "tcp://" + addr, Topic: "kv-events", Mode: ModeBind}, Limits{}, nil)
				s.run(t)
				args = append(args, "connect")
			}
			cmd := exec.Command(python, args...)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			line, err := bufio.NewReader(out).ReadString('\n')
			require.NoError(t, err)
			require.Equal(t, "ready\n", line)

			messages := 3
			if s == nil {
				s = newTestSub(t, cfg, Limits{}, nil)
				s.run(t)
			}
			if tc.mode == "replay" {
				messages = 2
			}
			s.wait(t, messages)
			keys := AppendKeys(nil, seqTokens(0, 48), 16, 0)
			require.Equal(t, 2, s.Leading(keys), "blocks 0 and 1 stored, block 2 stored then removed")
			require.Equal(t, 2, s.Blocks())
			require.Equal(t, 16, s.BlockSize())
			require.Zero(t, s.counter(t, "decode_errors_total"))
			require.Zero(t, s.counter(t, "sequence_gaps_total"))
			require.Equal(t, float64(1), s.counter(t, "dropped_total", "reason", dropOtherMedium))
			if tc.mode == "replay" {
				require.Equal(t, float64(1), s.counter(t, "replayed_batches_total"))
			}
		})
	}
}
