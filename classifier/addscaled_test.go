package classifier

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAddScaledSameBits holds addScaled (AVX2 on this CPU, when it has it) to the scalar
// loop's bits: every length from 0 to 400 (the vector loop's 16 and 8 and the scalar tail),
// int8 rows with both extremes, and scales from subnormal to huge, on accumulators that
// already hold sums of both signs, so every rounding of the two steps is exercised.
func TestAddScaledSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	scales := []float32{0, 1, -1, 0.0123, 3.5e-3, 1e-40, -7e-39, 1.7e38, float32(math.Inf(1)), 1.0000001}
	for n := 0; n <= 400; n++ {
		row := make([]int8, n)
		for i := range row {
			row[i] = int8(rng.IntN(256) - 128)
		}
		if n > 2 {
			row[0], row[1] = -128, 127
		}
		for k, sc := range append(scales, rng.Float32()*0.02) {
			want, got := make([]float32, n+3), make([]float32, n+3)
			for i := range want {
				want[i] = (rng.Float32() - 0.5) * float32(math.Pow(10, float64(rng.IntN(9)-4)))
				got[i] = want[i]
			}
			addScaledGo(want[:n], row, sc)
			addScaled(got, row, sc)
			for i := range want {
				if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
					t.Fatalf("n=%d scale %d (%g): acc[%d] = %g (%#x), the scalar loop gives %g (%#x)",
						n, k, sc, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
	if !hasAVX2 {
		t.Log("no AVX2 here: addScaled ran the scalar loop")
	}
}

// FuzzAddScaled compares addScaled with the scalar loop on fuzzed rows, scales and
// accumulators (NaN results compare as NaN: their payload is the CPU's).
func FuzzAddScaled(f *testing.F) {
	f.Add([]byte{1, 2, 3, 255, 128, 127, 0, 9, 10}, float32(0.5), float32(-1.25))
	f.Add(make([]byte, 40), float32(1e-40), float32(3e38))
	f.Fuzz(func(t *testing.T, raw []byte, sc, start float32) {
		row := make([]int8, len(raw))
		for i, b := range raw {
			row[i] = int8(b)
		}
		want, got := make([]float32, len(row)), make([]float32, len(row))
		for i := range want {
			want[i] = start * float32(i%7-3)
			got[i] = want[i]
		}
		addScaledGo(want, row, sc)
		addScaled(got, row, sc)
		for i := range want {
			w, g := want[i], got[i]
			if w != w && g != g {
				continue
			}
			if math.Float32bits(w) != math.Float32bits(g) {
				t.Fatalf("acc[%d] = %g, the scalar loop gives %g (row %v, scale %g, start %g)", i, g, w, row, sc, start)
			}
		}
	})
}

// BenchmarkAddScaled is one 384-value row of the shipped table's shape added into a
// text's sum: the vector loop where the CPU has AVX2, and the scalar loop.
//
//	go test -run '^$' -bench AddScaled ./classifier/
func BenchmarkAddScaled(b *testing.B) {
	row, acc := make([]int8, 384), make([]float32, 384)
	for i := range row {
		row[i] = int8(i*37 + 11)
	}
	b.Run("addScaled", func(b *testing.B) {
		for b.Loop() {
			addScaled(acc, row, 0.0123)
		}
	})
	b.Run("scalar", func(b *testing.B) {
		for b.Loop() {
			addScaledGo(acc, row, 0.0123)
		}
	})
}
