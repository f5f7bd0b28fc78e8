package kvevents

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// decoded is what the decoder made of a payload, for comparisons.
type decoded struct {
	kind      kind
	hashes    []uint64
	parent    *uint64
	tokens    []uint32
	blockSize int
	lora      uint64
	offGPU    bool
	tooMany   bool
}

func decodeAll(t *testing.T, payload []byte, maxTokens int) (batch, []decoded, int) {
	t.Helper()
	d := decoder{maxTokens: maxTokens}
	b, err := d.header(payload)
	require.NoError(t, err)
	var out []decoded
	bad := d.events(b, func(ev *event) {
		x := decoded{kind: ev.kind, hashes: append([]uint64(nil), ev.hashes...), tokens: append([]uint32(nil), ev.tokens...),
			blockSize: ev.blockSize, lora: ev.lora, offGPU: ev.offGPU, tooMany: ev.tooManyTokens}
		if ev.hasParent {
			x.parent = ptr(ev.parent)
		}
		out = append(out, x)
	})
	return b, out, bad
}

func TestDecodeBothEncodings(t *testing.T) {
	events := []Event{
		{Type: BlockStored, BlockHashes: []uint64{11, 1 << 63}, TokenIDs: seqTokens(0, 8), BlockSize: 4},
		{Type: BlockStored, BlockHashes: []uint64{12}, ParentBlockHash: ptr(uint64(1 << 63)), TokenIDs: seqTokens(100, 4), BlockSize: 4},
		{Type: BlockRemoved, BlockHashes: []uint64{11}},
		{Type: AllBlocksCleared},
	}
	want := []decoded{
		{kind: kindStored, hashes: []uint64{11, 1 << 63}, tokens: seqTokens(0, 8), blockSize: 4},
		{kind: kindStored, hashes: []uint64{12}, parent: ptr(uint64(1 << 63)), tokens: seqTokens(100, 4), blockSize: 4},
		{kind: kindRemoved, hashes: []uint64{11}},
		{kind: kindCleared},
	}
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"map events (vLLM 0.32)", AppendBatch(nil, 1.5, 0, events)},
		{"tagged arrays (older vLLM)", arrayBatch(1.5, events, false)},
		{"tagged arrays with unknown trailing fields", arrayBatch(1.5, events, true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, got, bad := decodeAll(t, tc.payload, 1<<10)
			require.Zero(t, bad)
			require.Equal(t, 1.5, b.ts)
			require.Equal(t, want, got)
		})
	}
}

func TestDecodeMapBatchBytesHashesAndUnknownFields(t *testing.T) {
	// {"ts": 2, "events": [{"type": "BlockStored", "block_hashes": [b"ab", b"cd"],
	//   "parent_block_hash": nil, "token_ids": [1,2], "block_size": 1,
	//   "lora_id": 7, "medium": "GPU", "extra_keys": [[1, "x"], nil], "new": {"a": 1}}],
	//  "data_parallel_rank": 3, "future": [1]}
	p := appendMap(nil, 4)
	p = appendFloat(appendStr(p, "ts"), 2)
	p = appendArray(appendStr(p, "events"), 1)
	p = appendMap(p, 9)
	p = appendStr(appendStr(p, "type"), "BlockStored")
	p = appendArray(appendStr(p, "block_hashes"), 2)
	p = append(p, 0xc4, 2, 'a', 'b', 0xc4, 2, 'c', 'd')
	p = append(appendStr(p, "parent_block_hash"), 0xc0)
	p = append(appendArray(appendStr(p, "token_ids"), 2), 1, 2)
	p = append(appendStr(p, "block_size"), 1)
	p = append(appendStr(p, "lora_id"), 7)
	p = appendStr(appendStr(p, "medium"), "GPU")
	p = appendArray(appendStr(p, "extra_keys"), 2)
	p = appendStr(append(appendArray(p, 2), 1), "x")
	p = append(p, 0xc0)
	p = append(appendMap(appendStr(p, "new"), 1), 0xa1, 'a', 1)
	p = append(appendStr(p, "data_parallel_rank"), 3)
	p = append(appendArray(appendStr(p, "future"), 1), 1)

	b, got, bad := decodeAll(t, p, 16)
	require.Zero(t, bad)
	require.Equal(t, int64(3), b.rank)
	require.Len(t, got, 1)
	require.Equal(t, kindStored, got[0].kind)
	require.Len(t, got[0].hashes, 2)
	require.NotEqual(t, got[0].hashes[0], got[0].hashes[1])
	require.Equal(t, uint64(7), got[0].lora)
	require.Equal(t, []uint32{1, 2}, got[0].tokens)
}

func TestDecodeSkipsBadEventsKeepsGoodOnes(t *testing.T) {
	good := Event{Type: BlockStored, BlockHashes: []uint64{1}, TokenIDs: seqTokens(0, 4), BlockSize: 4}
	short := Event{Type: BlockStored, BlockHashes: []uint64{2, 3}, TokenIDs: seqTokens(0, 4), BlockSize: 4} // 4 tokens for 2 blocks
	unknown := Event{Type: "BlockMoved"}
	p := AppendBatch(nil, 0, 0, []Event{good, short, unknown, good})
	_, got, bad := decodeAll(t, p, 1<<10)
	require.Equal(t, 1, bad)
	require.Len(t, got, 3)
	require.Equal(t, kindUnknown, got[1].kind)
}

func TestDecodeTokenCap(t *testing.T) {
	p := AppendBatch(nil, 0, 0, []Event{{Type: BlockStored, BlockHashes: []uint64{1, 2}, TokenIDs: seqTokens(0, 8), BlockSize: 4}})
	_, got, bad := decodeAll(t, p, 7)
	require.Zero(t, bad)
	require.True(t, got[0].tooMany)
	require.Empty(t, got[0].tokens)
}

func TestDecodeRejectsGarbage(t *testing.T) {
	for _, p := range [][]byte{
		nil,
		{0xc1},
		{0x93, 0xcb, 0, 0}, // truncated float
		{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}, // events array claims 4G elements
		{0x81, 0xa2, 't', 's', 0x00},               // map without events
		{0xa3, 'a', 'b', 'c'},                      // a string
	} {
		d := decoder{maxTokens: 16}
		_, err := d.header(p)
		require.Error(t, err, "%x", p)
	}
}

func TestSkipDepthBounded(t *testing.T) {
	p := make([]byte, 0, 100_001)
	for range 100_000 {
		p = append(p, 0x91) // [[[[...
	}
	p = append(p, 0)
	r := reader{b: p}
	r.skip()
	require.Error(t, r.err)
}

func FuzzDecode(f *testing.F) {
	f.Add(AppendBatch(nil, 1, 0, []Event{
		{Type: BlockStored, BlockHashes: []uint64{1, 2}, TokenIDs: seqTokens(0, 8), BlockSize: 4},
		{Type: BlockStored, BlockHashes: []uint64{3}, ParentBlockHash: ptr(uint64(2)), TokenIDs: seqTokens(8, 4), BlockSize: 4},
		{Type: BlockRemoved, BlockHashes: []uint64{1}},
		{Type: AllBlocksCleared},
	}))
	f.Add(arrayBatch(1, []Event{{Type: BlockStored, BlockHashes: []uint64{9}, TokenIDs: seqTokens(0, 2), BlockSize: 2}}, true))
	f.Add([]byte{0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90, 0xc0})
	f.Fuzz(func(t *testing.T, payload []byte) {
		d := decoder{maxTokens: 64}
		b, err := d.header(payload)
		if err != nil {
			return
		}
		x := newIndex(16, 16)
		d.events(b, func(ev *event) {
			if ev.kind == kindStored && !ev.offGPU && ev.group == 0 && !ev.tooManyTokens {
				x.store(ev)
			}
			if ev.kind == kindRemoved {
				for _, h := range ev.hashes {
					x.remove(h)
				}
			}
			if ev.kind == kindCleared {
				x.reset()
			}
		})
		if x.len() > 16 {
			t.Fatalf("index holds %d blocks, capacity 16", x.len())
		}
		held := 0
		for _, n := range x.held {
			held += int(n)
		}
		if held != x.len() {
			t.Fatalf("held counts %d blocks, index %d", held, x.len())
		}
	})
}

// BenchmarkApplyBatch decodes and applies a batch of 64 BlockStored events
// of one 16-token block each, chained, as a prefill of 1024 tokens arrives.
func BenchmarkApplyBatch(b *testing.B) {
	events := make([]Event, 64)
	for i := range events {
		events[i] = Event{Type: BlockStored, BlockHashes: []uint64{uint64(i + 1)}, TokenIDs: seqTokens(16*i, 16), BlockSize: 16}
		if i > 0 {
			events[i].ParentBlockHash = ptr(uint64(i))
		}
	}
	payload := AppendBatch(nil, 1, 0, events)
	d := decoder{maxTokens: 1 << 16}
	x := newIndex(1<<16, 16)
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		hdr, err := d.header(payload)
		if err != nil {
			b.Fatal(err)
		}
		d.events(hdr, func(ev *event) { x.store(ev) })
	}
	b.ReportMetric(float64(b.N)*64/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.N)*1024/b.Elapsed().Seconds(), "tokens/s")
}
