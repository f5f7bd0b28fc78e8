package kvevents

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// rawPub is a hand-driven ZMTP PUB peer for tests that need to send what no
// ZeroMQ library would (garbage, oversized frames) or to know exactly when
// the subscription has arrived.
type rawPub struct {
	t     *testing.T
	nc    net.Conn
	topic []byte // the subscription received
}

// handshake runs the PUB side of the handshake on nc and reads the
// subscription.
func handshakePub(t *testing.T, nc net.Conn) *rawPub {
	t.Helper()
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := nc.Write(greeting())
	require.NoError(t, err)
	var g [64]byte
	_, err = io.ReadFull(nc, g[:])
	require.NoError(t, err)
	_, err = nc.Write(command("READY", property("Socket-Type", "PUB")))
	require.NoError(t, err)
	c := &zconn{nc: nc, br: newBufReader(nc), max: 1 << 20}
	name, _, err := c.readCommand()
	require.NoError(t, err)
	require.Equal(t, "READY", name)
	flags, size, err := c.header()
	require.NoError(t, err)
	require.Zero(t, flags&0x04, "subscription must be a message")
	sub := make([]byte, size)
	_, err = io.ReadFull(c.br, sub)
	require.NoError(t, err)
	require.Equal(t, byte(1), sub[0])
	return &rawPub{t: t, nc: nc, topic: sub[1:]}
}

// send writes one message of frames.
func (p *rawPub) send(frames ...[]byte) {
	p.t.Helper()
	var out []byte
	for i, f := range frames {
		var more byte
		if i < len(frames)-1 {
			more = 1
		}
		out = append(out, frame(more, f)...)
	}
	_, err := p.nc.Write(out)
	require.NoError(p.t, err)
}

// batch sends [topic, seq, payload].
func (p *rawPub) batch(seq uint64, payload []byte) {
	p.send([]byte("kv-events"), binary.BigEndian.AppendUint64(nil, seq), payload)
}

// testSub is a Subscriber under test with a channel per handled message.
type testSub struct {
	*Subscriber
	reg  *prometheus.Registry
	msgs chan struct{}
}

func newTestSub(t *testing.T, cfg Config, lim Limits, now func() time.Time) *testSub {
	t.Helper()
	reg := prometheus.NewRegistry()
	msgs := make(chan struct{}, 1024)
	s, err := NewSubscriber("fast", "fast-0", cfg, lim, Options{Now: now, StaleAfter: time.Second,
		Handled: func() { msgs <- struct{}{} }}, reg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return &testSub{Subscriber: s, reg: reg, msgs: msgs}
}

// run starts Run and stops it at the end of the test.
func (s *testSub) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
}

// wait blocks until n more messages were handled.
func (s *testSub) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-s.msgs:
		case <-time.After(10 * time.Second):
			t.Fatalf("no message handled within 10s")
		}
	}
}

func (s *testSub) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	require.NoError(t, err)
	var total float64
	for _, mf := range mfs {
		if mf.GetName() != "triage_upstream_kv_events_"+name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total
}

// waitFor polls cond until it holds or 10 s pass: for conditions owned by a
// library that offers no notification (a zmq4 PUB learning a subscription).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// arrayBatch encodes a batch the way older vLLM did: the batch and each
// event as msgspec array_like structs, events tagged by their type name.
// extra appends one unknown trailing element to each event.
func arrayBatch(ts float64, events []Event, extra bool) []byte {
	dst := appendArray(nil, 3)
	dst = appendFloat(dst, ts)
	dst = appendArray(dst, len(events))
	for _, e := range events {
		// extra pads the fields newer versions added (nil) and then appends
		// one no version has.
		tail := 0
		if extra {
			tail = 1
		}
		pad := func(n int) {
			if extra {
				for range n {
					dst = append(dst, 0xc0)
				}
			}
		}
		switch e.Type {
		case BlockStored:
			dst = appendArray(dst, 7+4*tail)
			dst = appendStr(dst, e.Type)
			dst = appendHashes(dst, e.BlockHashes)
			if e.ParentBlockHash == nil {
				dst = append(dst, 0xc0)
			} else {
				dst = appendUint(dst, *e.ParentBlockHash)
			}
			dst = appendArray(dst, len(e.TokenIDs))
			for _, t := range e.TokenIDs {
				dst = appendUint(dst, uint64(t))
			}
			dst = appendUint(dst, uint64(e.BlockSize))
			dst = append(dst, 0xc0)     // lora_id
			dst = appendStr(dst, "GPU") // medium
			pad(3)                      // lora_name, extra_keys, group_idx
		case BlockRemoved:
			dst = appendArray(dst, 3+2*tail)
			dst = appendStr(dst, e.Type)
			dst = appendHashes(dst, e.BlockHashes)
			dst = appendStr(dst, "GPU")
			pad(1) // group_idx
		default:
			dst = appendArray(dst, 1+tail)
			dst = appendStr(dst, e.Type)
		}
		if extra {
			dst = appendStr(dst, "future field")
		}
	}
	return append(dst, 0xc0) // data_parallel_rank: nil
}

// seqTokens returns n token ids starting at from.
func seqTokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// handshakeAs runs the peer side of a handshake as a socket of type typ
// (the test's stand-in for an engine's socket).
func handshakeAs(nc net.Conn, typ string) (*zconn, error) {
	c, err := handshake(nc, typ, 1<<20)
	if err != nil {
		return nil, err
	}
	return c, nc.SetDeadline(time.Time{})
}
