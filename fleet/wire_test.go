package fleet

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream/policy"
)

// typicalPick is a turn of the policies sweep's trace: a 1,500-token system prompt plus a
// conversation, about 8,000 characters, so 63 blocks of 128 characters.
func typicalPick(rng *rand.Rand) policy.Observation {
	o := policy.Observation{ReplicaID: "fast-2", Session: rng.Uint64(), BlockChars: 128, Hashes: make([]uint64, 63)}
	for i := range o.Hashes {
		o.Hashes[i] = rng.Uint64()
	}
	return o
}

func TestWireRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	picks := []policy.Observation{typicalPick(rng), {ReplicaID: "r1", BlockChars: 64}, {ReplicaID: "r0", Session: 9}}
	m, err := decode(encodePicks(nil, "gw-a", picks), false)
	require.NoError(t, err)
	require.Equal(t, kindPicks, m.kind)
	require.Equal(t, "gw-a", m.sender)
	require.Len(t, m.picks, 3)
	require.Equal(t, picks[0], m.picks[0])
	require.Equal(t, "r1", m.picks[1].ReplicaID)
	require.Empty(t, m.picks[1].Hashes)
	require.Equal(t, uint64(9), m.picks[2].Session)

	m, err = decode(encodeLoad(nil, "gw-b", map[string]int{"r0": 3, "r1": 0, "r2": 12}), false)
	require.NoError(t, err)
	require.Equal(t, kindLoad, m.kind)
	require.Equal(t, "gw-b", m.sender)
	require.Equal(t, map[string]int{"r0": 3, "r2": 12}, m.load, "replicas with nothing in flight are left out")

	h, err := decode(encodePicks(nil, "gw-a", picks), true)
	require.NoError(t, err)
	require.Equal(t, "gw-a", h.sender)
	require.Nil(t, h.picks, "header only")
}

// Every prefix of a valid message, garbage, and messages claiming more than they hold are
// refused without a panic or a large allocation.
func TestWireRejectsMalformed(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	valid := encodePicks(nil, "gw", []policy.Observation{typicalPick(rng)})
	for n := range len(valid) {
		_, err := decode(valid[:n], false)
		require.Error(t, err, "prefix of %d bytes", n)
	}
	_, err := decode(append(valid, 0), false)
	require.Error(t, err, "trailing bytes")
	bad := append([]byte(nil), valid...)
	bad[0] = 2
	_, err = decode(bad, false)
	require.ErrorContains(t, err, "version 2")
	bad[0], bad[1] = wireVersion, 9
	_, err = decode(bad, false)
	require.ErrorContains(t, err, "kind 9")
	// A pick claiming 2^40 hashes, and a load claiming 2^60 entries.
	huge := appendHeader(nil, kindPicks, "gw")
	huge = append(huge, 1, 1, 'r', 0, 0, 0, 0, 0, 0, 0, 0, 128, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20)
	_, err = decode(huge, false)
	require.Error(t, err)
	huge = appendHeader(nil, kindLoad, "gw")
	huge = append(huge, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f)
	_, err = decode(huge, false)
	require.Error(t, err)
	for range 2000 {
		junk := make([]byte, rng.IntN(64))
		for i := range junk {
			junk[i] = byte(rng.Uint32())
		}
		if len(junk) > 0 {
			junk[0] = wireVersion
		}
		decode(junk, false) // must not panic
	}
}

func FuzzWireDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	f.Add(encodePicks(nil, "gw", []policy.Observation{typicalPick(rng)}))
	f.Add(encodeLoad(nil, "gw", map[string]int{"r0": 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b, false)
		if err != nil {
			return
		}
		// What decodes re-encodes to a message that decodes the same.
		var again []byte
		switch m.kind {
		case kindPicks:
			again = encodePicks(nil, m.sender, m.picks)
		case kindLoad:
			again = encodeLoad(nil, m.sender, m.load)
		}
		m2, err := decode(again, false)
		require.NoError(t, err)
		require.Equal(t, m.sender, m2.sender)
		require.Equal(t, len(m.picks), len(m2.picks))
	})
}

// jsonPick is the same pick as JSON, for the comparison in BenchmarkWire.
type jsonPick struct {
	Sender  string   `json:"g"`
	Replica string   `json:"r"`
	Session uint64   `json:"s"`
	Block   int      `json:"b"`
	Hashes  []uint64 `json:"h"`
}

// BenchmarkWire encodes and decodes one typical pick, in the binary form and as JSON:
// bytes per message and time per round trip.
func BenchmarkWire(b *testing.B) {
	o := typicalPick(rand.New(rand.NewPCG(7, 8)))
	picks := []policy.Observation{o}
	b.Run("binary", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf = encodePicks(buf[:0], "triage-7f9c2d-1a2b3c4d", picks)
			if _, err := decode(buf, false); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(buf)), "bytes/msg")
	})
	b.Run("json", func(b *testing.B) {
		var n int
		for b.Loop() {
			buf, err := json.Marshal(jsonPick{Sender: "triage-7f9c2d-1a2b3c4d", Replica: o.ReplicaID, Session: o.Session, Block: o.BlockChars, Hashes: o.Hashes})
			if err != nil {
				b.Fatal(err)
			}
			var back jsonPick
			if err := json.Unmarshal(buf, &back); err != nil {
				b.Fatal(err)
			}
			n = len(buf)
		}
		b.ReportMetric(float64(n), "bytes/msg")
	})
}
