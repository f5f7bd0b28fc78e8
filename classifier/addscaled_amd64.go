package classifier

import "golang.org/x/sys/cpu"

// hasAVX2 picks addScaled's vector loop. Every x86-64 CPU of the last decade has AVX2; the
// scalar loop remains for the others (and for the tests, which hold the two to the same bits).
var hasAVX2 = cpu.X86.HasAVX2

// addScaledAVX2 does addScaledGo's work on the first n values (a multiple of 8) of row, eight
// at a time: sign-extended, converted, multiplied by sc, rounded, added, rounded, as the scalar
// loop does one at a time (VMULPS then VADDPS, never a fused multiply-add), so the sums are
// the same bits.
//
//go:noescape
func addScaledAVX2(acc *float32, row *int8, n int, sc float32)
