//go:build !amd64

package classifier

// hasAVX2 is false off amd64: addScaled runs its scalar loop.
const hasAVX2 = false

func addScaledAVX2(acc *float32, row *int8, n int, sc float32) { panic("addScaledAVX2 off amd64") }
