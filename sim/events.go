package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/triage-gw/triage/upstream/kvevents"
)

// KVEventsTopic is the topic the simulator publishes its KV-cache events on.
const KVEventsTopic = "kv-events"

// Tokenize is the simulator's tokenizer: every 4 bytes of text are one
// token, whose id is those bytes as a little-endian uint32 (the last token
// of a text whose length is not a multiple of 4 is zero-padded). So
// len(Tokenize(s)) == CountTokens(s), a prefix of bytes gives a prefix of
// tokens, and a block of BlockChars bytes is a block of BlockChars/4
// tokens: what the simulator's /tokenize answers and its KV events carry.
func Tokenize(text string) []uint32 {
	out := make([]uint32, 0, CountTokens(text))
	for i := 0; i < len(text); i += 4 {
		var b [4]byte
		copy(b[:], text[i:min(i+4, len(text))])
		out = append(out, binary.LittleEndian.Uint32(b[:]))
	}
	return out
}

// eventPublisher publishes a replica's KV-cache events as vLLM does: a ZMQ
// PUB socket sending [topic, sequence (uint64 big-endian, from 0), msgpack
// batch], each event a map (vLLM 0.32's encoding). Events are sent from the
// request goroutine that caused them, under the prefix cache's lock, so
// their order is the cache's; a subscriber that stops reading can hold up
// the requests of this replica (tests and benchmarks only read promptly).
type eventPublisher struct {
	pub       zmq4.Socket
	cancel    context.CancelFunc
	endpoint  string
	blockSize int // tokens per block
	clock     Clock

	mu  sync.Mutex
	seq uint64
	buf []byte
}

// listenEvents binds a PUB socket at endpoint (tcp://host:port; port 0
// picks a free one).
func listenEvents(endpoint string, blockChars int, clock Clock) (*eventPublisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	pub := zmq4.NewPub(ctx)
	if err := pub.Listen(endpoint); err != nil {
		cancel()
		pub.Close()
		return nil, fmt.Errorf("kv events: listen %s: %w", endpoint, err)
	}
	ep := endpoint
	if a, ok := pub.Addr().(*net.TCPAddr); ok {
		host, _, _ := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
		if host == "*" || host == "" || host == "0.0.0.0" {
			host = "127.0.0.1"
		}
		ep = "tcp://" + net.JoinHostPort(host, strconv.Itoa(a.Port))
	}
	return &eventPublisher{pub: pub, cancel: cancel, endpoint: ep, blockSize: blockChars / 4, clock: clock}, nil
}

// blocks publishes what one insert into the prefix cache changed: the new
// blocks of prompt (indices into hashes) as BlockStored events, one per run
// of consecutive new blocks, and the evicted ones as one BlockRemoved.
func (p *eventPublisher) blocks(prompt string, hashes []uint64, stored []int, removed []uint64, blockChars int) {
	var evs []kvevents.Event
	for i := 0; i < len(stored); {
		j := i + 1
		for j < len(stored) && stored[j] == stored[j-1]+1 {
			j++
		}
		first, last := stored[i], stored[j-1]
		ev := kvevents.Event{
			Type:        kvevents.BlockStored,
			BlockHashes: hashes[first : last+1],
			TokenIDs:    Tokenize(prompt[first*blockChars : (last+1)*blockChars]),
			BlockSize:   p.blockSize,
		}
		if first > 0 {
			ev.ParentBlockHash = &hashes[first-1]
		}
		evs = append(evs, ev)
		i = j
	}
	if len(removed) > 0 {
		evs = append(evs, kvevents.Event{Type: kvevents.BlockRemoved, BlockHashes: removed})
	}
	p.send(evs)
}

// cleared publishes AllBlocksCleared.
func (p *eventPublisher) cleared() {
	p.send([]kvevents.Event{{Type: kvevents.AllBlocksCleared}})
}

func (p *eventPublisher) send(evs []kvevents.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts := float64(p.clock.Now().UnixNano()) / 1e9
	p.buf = kvevents.AppendBatch(p.buf[:0], ts, 0, evs)
	seq := binary.BigEndian.AppendUint64(nil, p.seq)
	p.seq++
	// A send that fails (no subscriber is not a failure) loses the batch,
	// as a vLLM publisher past its high-water mark does.
	_ = p.pub.Send(zmq4.NewMsgFrom([]byte(KVEventsTopic), seq, append([]byte(nil), p.buf...)))
}

func (p *eventPublisher) close() {
	p.cancel()
	p.pub.Close()
}
