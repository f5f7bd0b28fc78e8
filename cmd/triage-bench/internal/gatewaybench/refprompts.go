package gatewaybench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"

	"github.com/triage-gw/triage/bench/dolly"
)

// sideKey names one cell of the side-by-side scenario: a repeat, a client count and whether
// the answers stream. It goes into every reference tag, so a tag says where its request was
// sent from.
type sideKey struct {
	Repeat  int  `json:"repeat"`
	Clients int  `json:"clients"`
	Stream  bool `json:"stream"`
}

// refPrompts hands out user prompts made unique the way load tools and applications make
// them: a Dolly instruction (of any of the eight categories, in a seeded order) with a
// reference tag appended, "Name three birds. (ref r1-false-c1-3fa9b2c1-8e2d-123)". The
// tag's last number is a counter that never repeats, so no two prompts are the same; the
// hex parts are derived from it and the seed, as a request id would be. Safe for concurrent
// use.
type refPrompts struct {
	instructions []string
	seed         uint64
	next         atomic.Int64
}

// newRefPrompts takes every distinct instruction of rows (whitespace runs collapsed) and
// shuffles them with seed.
func newRefPrompts(rows []dolly.Row, seed uint64) (*refPrompts, error) {
	seen := map[string]bool{}
	var ins []string
	for _, r := range rows {
		s := strings.Join(strings.Fields(r.Instruction), " ")
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		ins = append(ins, s)
	}
	if len(ins) == 0 {
		return nil, errors.New("side-by-side: no Dolly instruction to build prompts from")
	}
	rng := rand.New(rand.NewPCG(seed, 0x72656670))
	rng.Shuffle(len(ins), func(i, j int) { ins[i], ins[j] = ins[j], ins[i] })
	return &refPrompts{instructions: ins, seed: seed}, nil
}

// take returns the next prompt, tagged with k.
func (p *refPrompts) take(k sideKey) string {
	n := p.next.Add(1) - 1
	return p.instructions[n%int64(len(p.instructions))] + " " + refTag(k, p.seed, n)
}

// refTag is "(ref r<repeat>-<stream>-c<clients>-<8 hex>-<4 hex>-<n>)", about 20 word pieces
// for the classifier's tokenizer.
func refTag(k sideKey, seed uint64, n int64) string {
	h := splitmix64(seed ^ uint64(n)*0x9e3779b97f4a7c15)
	return fmt.Sprintf("(ref r%d-%t-c%d-%08x-%04x-%d)", k.Repeat, k.Stream, k.Clients, uint32(h>>32), uint16(h), n)
}

// splitmix64 scrambles x (Steele, Lea and Flood's SplitMix64 finaliser).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
