package kvevents

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"
)

// TestSubscriberWithZMQPublisher runs the subscriber against go-zeromq's
// PUB socket, an independent ZMTP implementation, sending both encodings.
func TestSubscriberWithZMQPublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	require.NoError(t, pub.Listen("tcp://127.0.0.1:0"))

	s := newTestSub(t, Config{Endpoint: "tcp://" + pub.Addr().String(), Topic: "kv-events"}, Limits{}, nil)
	s.run(t)
	waitFor(t, "the publisher to see the subscription", func() bool {
		return len(pub.(zmq4.Topics).Topics()) > 0
	})

	var seq uint64
	send := func(payload []byte) {
		t.Helper()
		msg := zmq4.NewMsgFrom([]byte("kv-events"), binary.BigEndian.AppendUint64(nil, seq), payload)
		require.NoError(t, pub.Send(msg))
		seq++
		s.wait(t, 1)
	}
	prompt := seqTokens(1000, 64)
	send(AppendBatch(nil, 1, 0, []Event{
		{Type: BlockStored, BlockHashes: []uint64{1, 2}, TokenIDs: prompt[:32], BlockSize: 16},
	}))
	send(arrayBatch(2, []Event{
		{Type: BlockStored, BlockHashes: []uint64{3, 4}, ParentBlockHash: ptr(uint64(2)), TokenIDs: prompt[32:], BlockSize: 16},
	}, true))

	keys := AppendKeys(nil, prompt, 16, 0)
	require.Equal(t, 4, s.Leading(keys))
	require.Equal(t, 16, s.BlockSize())
	require.True(t, s.Live())

	send(AppendBatch(nil, 3, 0, []Event{{Type: BlockRemoved, BlockHashes: []uint64{3}}}))
	require.Equal(t, 2, s.Leading(keys))
	send(arrayBatch(4, []Event{{Type: AllBlocksCleared}}, false))
	require.Equal(t, 0, s.Leading(keys))
	require.Zero(t, s.Blocks())
	require.Equal(t, float64(2), s.counter(t, "received_total", "type", typeStored))
	require.Equal(t, float64(1), s.counter(t, "received_total", "type", typeRemoved))
	require.Equal(t, float64(1), s.counter(t, "received_total", "type", typeCleared))
	require.Zero(t, s.counter(t, "sequence_gaps_total"))
	require.Zero(t, s.counter(t, "decode_errors_total"))
}

// rawSetup starts a subscriber in connect mode against a raw publisher and
// returns both once the subscription has arrived.
func rawSetup(t *testing.T, lim Limits, now func() time.Time) (*testSub, *rawPub, net.Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	s := newTestSub(t, Config{Endpoint: "tcp://" + ln.Addr().String(), Topic: "kv-events"}, lim, now)
	s.run(t)
	return s, acceptPub(t, ln), ln
}

func acceptPub(t *testing.T, ln net.Listener) *rawPub {
	t.Helper()
	nc, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	p := handshakePub(t, nc)
	require.Equal(t, "kv-events", string(p.topic))
	return p
}

func storedBlocks(from uint64, parent *uint64, tokens []uint32, bs int) Event {
	hs := make([]uint64, len(tokens)/bs)
	for i := range hs {
		hs[i] = from + uint64(i)
	}
	return Event{Type: BlockStored, BlockHashes: hs, ParentBlockHash: parent, TokenIDs: tokens, BlockSize: bs}
}

func TestSubscriberGapsRestartsAndGarbage(t *testing.T) {
	s, p, ln := rawSetup(t, Limits{MaxBlocks: 1 << 10, MaxMessageBytes: 4096, MaxTokensPerEvent: 64, MaxPendingBlocks: 64}, nil)
	prompt := seqTokens(0, 32)
	keys := AppendKeys(nil, prompt, 8, 0)

	p.batch(5, AppendBatch(nil, 0, 0, []Event{storedBlocks(100, nil, prompt[:16], 8)}))
	p.batch(6, AppendBatch(nil, 0, 0, []Event{storedBlocks(102, ptr(uint64(101)), prompt[16:], 8)}))
	s.wait(t, 2)
	require.Equal(t, 4, s.Leading(keys))

	// Garbage: wrong frame count, short sequence, undecodable payload,
	// a valid batch holding one malformed event.
	p.send([]byte("kv-events"), []byte("only two frames"))
	p.batch(7, []byte{0xc1, 0xff})
	p.send([]byte("kv-events"), []byte{1, 2, 3}, AppendBatch(nil, 0, 0, nil))
	p.batch(8, AppendBatch(nil, 0, 0, []Event{{Type: BlockStored, BlockHashes: []uint64{9}, TokenIDs: seqTokens(0, 3), BlockSize: 8}}))
	s.wait(t, 4)
	require.Equal(t, float64(4), s.counter(t, "decode_errors_total"))
	require.Equal(t, 4, s.Leading(keys), "garbage changes nothing")

	// Oversized: a frame over max_message_bytes is read past, and the
	// stream goes on.
	p.batch(9, append(AppendBatch(nil, 0, 0, nil), make([]byte, 8192)...))
	// Over the token cap: the event's blocks are not indexed; the next
	// event chained to them is an orphan.
	p.batch(10, AppendBatch(nil, 0, 0, []Event{
		storedBlocks(200, nil, seqTokens(500, 72), 8),
		storedBlocks(300, ptr(uint64(208)), seqTokens(600, 8), 8),
	}))
	s.wait(t, 2)
	require.Equal(t, float64(1), s.counter(t, "dropped_total", "reason", dropMessageSize))
	require.Equal(t, float64(9), s.counter(t, "dropped_total", "reason", dropTokenCap))
	require.Equal(t, float64(1), s.counter(t, "dropped_total", "reason", dropOrphan))

	// A gap: batches 11 and 12 never arrive. The index is kept. Batches 7
	// and 9 were lost too (undecodable, oversized): their events are
	// missing as surely, so they count as gaps as well.
	p.batch(13, AppendBatch(nil, 0, 0, nil))
	s.wait(t, 1)
	require.Equal(t, float64(3), s.counter(t, "sequence_gaps_total"))
	require.Equal(t, float64(4), s.counter(t, "missed_batches_total"))
	require.Equal(t, 4, s.Leading(keys))

	// The engine restarts: the sequence starts again at 0, on a new
	// connection; the old index is cleared.
	p.nc.Close()
	p = acceptPub(t, ln)
	p.batch(0, AppendBatch(nil, 0, 0, []Event{storedBlocks(900, nil, prompt[:8], 8)}))
	s.wait(t, 1)
	require.Equal(t, float64(1), s.counter(t, "restarts_total"))
	require.Equal(t, 1, s.Leading(keys))
	require.Equal(t, float64(1), s.counter(t, "index_blocks"))
	require.Equal(t, float64(1), s.counter(t, "connected"))
}

func TestSubscriberBoundedBlocks(t *testing.T) {
	s, p, _ := rawSetup(t, Limits{MaxBlocks: 10, MaxMessageBytes: 1 << 20, MaxTokensPerEvent: 1 << 16, MaxPendingBlocks: 64}, nil)
	// A publisher that never removes anything: 100 chains of 5 blocks.
	for i := range 100 {
		p.batch(uint64(i), AppendBatch(nil, 0, 0, []Event{storedBlocks(uint64(1000*i), nil, seqTokens(10*i, 20), 4)}))
	}
	s.wait(t, 100)
	require.Equal(t, 10, s.Blocks())
	require.Equal(t, float64(490), s.counter(t, "dropped_total", "reason", dropCapacity))
	require.Equal(t, 5, s.Leading(AppendKeys(nil, seqTokens(990, 20), 4, 0)), "the newest chain is kept")
}

func TestSubscriberBindMode(t *testing.T) {
	// Find a free port, then let the subscriber listen on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	s := newTestSub(t, Config{Endpoint: "tcp://" + addr, Topic: "kv-events", Mode: ModeBind}, Limits{}, nil)
	s.run(t)

	var nc net.Conn
	waitFor(t, "the subscriber to listen", func() bool {
		nc, err = net.Dial("tcp", addr)
		return err == nil
	})
	t.Cleanup(func() { nc.Close() })
	p := handshakePub(t, nc)
	p.batch(0, AppendBatch(nil, 0, 0, []Event{storedBlocks(1, nil, seqTokens(0, 16), 16)}))
	s.wait(t, 1)
	require.Equal(t, 1, s.Leading(AppendKeys(nil, seqTokens(0, 16), 16, 0)))
}

func TestSubscriberLiveAndPending(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	s := newTestSub(t, Config{Endpoint: "tcp://" + ln.Addr().String(), Topic: "kv-events"}, Limits{}, now)
	require.False(t, s.Live(), "never connected")
	s.run(t)
	p := acceptPub(t, ln)
	p.batch(0, AppendBatch(nil, 0, 0, nil))
	s.wait(t, 1)
	require.True(t, s.Live())

	// A pick for blocks the replica lacks: they count as held for the
	// pending window, and the replica is expected to speak.
	keys := AppendKeys(nil, seqTokens(0, 32), 16, 0)
	s.Expect(keys)
	require.Equal(t, 2, s.Leading(keys))
	advance(1500 * time.Millisecond) // past stale_after (1s), within the pending ttl (2s)
	require.False(t, s.Live(), "picked, silent since")
	require.Equal(t, float64(1), s.counter(t, "fallbacks_total", "reason", fallbackSilent))
	p.batch(1, AppendBatch(nil, 0, 0, []Event{storedBlocks(1, nil, seqTokens(0, 32), 16)}))
	s.wait(t, 1)
	require.True(t, s.Live())
	advance(time.Second)
	require.Equal(t, 2, s.Leading(keys), "confirmed by the events")

	// The stream goes down: still Live for stale_after, then not.
	p.nc.Close()
	waitFor(t, "the connection to drop", func() bool { return s.counter(t, "connected") == 0 })
	require.True(t, s.Live())
	advance(time.Second)
	require.False(t, s.Live())
	require.Equal(t, float64(2), s.counter(t, "fallbacks_total", "reason", fallbackDown), "this one and the one before connecting")
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: ModeBind}, "kv.endpoint: required in bind mode"},
		{Config{Topic: "kv-events"}, "kv.endpoint: empty, so the endpoint, topic and replay_endpoint are asked from the engine"},
		{Config{Endpoint: "ipc:///tmp/x"}, "only tcp://host:port"},
		{Config{Endpoint: "tcp://*:5557"}, "host * means every interface"},
		{Config{Endpoint: "tcp://host"}, "want tcp://host:port"},
		{Config{Endpoint: "tcp://host:99999"}, "port must be"},
		{Config{Endpoint: "tcp://host:5557", Mode: "pub"}, `kv.mode: must be "connect" or "bind"`},
	} {
		err := tc.cfg.ValidateAt("kv")
		require.ErrorContains(t, err, tc.want)
	}
	require.NoError(t, Config{Endpoint: "tcp://*:5557", Mode: ModeBind}.ValidateAt("kv"))
	require.NoError(t, Config{Endpoint: "tcp://10.0.0.7:5557"}.ValidateAt("kv"))
	require.NoError(t, Config{}.ValidateAt("kv"), "no endpoint: discovered from the engine")
	_, err := NewSubscriber("p", "r", Config{}, Limits{}, Options{}, nil, nil)
	require.ErrorContains(t, err, "kv_events.endpoint: required", "without a Discover hook")
	require.ErrorContains(t, Limits{MaxBlocks: 0, MaxMessageBytes: 1, MaxTokensPerEvent: 1, MaxPendingBlocks: 1}.ValidateAt("kv"), "kv.max_blocks")
}

// serveReplay answers one replay request on ln as vLLM's ROUTER does:
// every buffered batch from the asked sequence number on, then the end
// marker. It returns the number asked for on the channel.
func serveReplay(t *testing.T, ln net.Listener, buffered [][]byte) <-chan uint64 {
	asked := make(chan uint64, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		c, err := handshakeAs(nc, "ROUTER")
		if err != nil {
			t.Error(err)
			return
		}
		frames, _, err := c.next()
		if err != nil || len(frames) != 2 || len(frames[0]) != 0 || len(frames[1]) != 8 {
			t.Errorf("replay request: %q, %v", frames, err)
			return
		}
		from := binary.BigEndian.Uint64(frames[1])
		asked <- from
		for seq := from; seq < uint64(len(buffered)); seq++ {
			if err := c.send(nil, binary.BigEndian.AppendUint64(nil, seq), buffered[seq]); err != nil {
				t.Error(err)
				return
			}
		}
		if err := c.send(nil, endSeq, nil); err != nil {
			t.Error(err)
		}
	}()
	return asked
}

func TestSubscriberReplaysAGap(t *testing.T) {
	replayLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { replayLn.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	s := newTestSub(t, Config{Endpoint: "tcp://" + ln.Addr().String(), Topic: "kv-events",
		ReplayEndpoint: "tcp://" + replayLn.Addr().String()}, Limits{}, nil)
	s.run(t)
	p := acceptPub(t, ln)

	prompt := seqTokens(0, 16)
	batches := make([][]byte, 4) // one block each, chained
	for i := range batches {
		var parent *uint64
		if i > 0 {
			parent = ptr(uint64(i))
		}
		batches[i] = AppendBatch(nil, 0, 0, []Event{storedBlocks(uint64(i+1), parent, prompt[4*i:4*i+4], 4)})
	}
	asked := serveReplay(t, replayLn, batches)
	p.batch(0, batches[0])
	p.batch(3, batches[3]) // 1 and 2 lost on the way
	s.wait(t, 2)
	require.Equal(t, uint64(1), <-asked)
	require.Equal(t, 4, s.Leading(AppendKeys(nil, prompt, 4, 0)), "the replayed blocks chain the last one")
	require.Equal(t, float64(2), s.counter(t, "replayed_batches_total"))
	require.Zero(t, s.counter(t, "sequence_gaps_total"))
	require.Zero(t, s.counter(t, "dropped_total", "reason", dropOrphan))
}
