package onnx

import "math"

// meanPoolL2 writes into dst (len dim) the mean of the first n token vectors
// of one row of hidden ([seq, dim], row-major), then scales it to unit L2
// norm. Tokens past n are padding and are ignored: this is mean pooling
// weighted by the attention mask, which is 1 for exactly the first n tokens.
// Sums run in float32 in token order, like the notebook's numpy code.
func meanPoolL2(dst, hidden []float32, n, dim int) {
	clear(dst)
	for t := 0; t < n; t++ {
		row := hidden[t*dim : (t+1)*dim]
		for j, v := range row {
			dst[j] += v
		}
	}
	inv := 1 / float32(n)
	var norm float64
	for j := range dst {
		dst[j] *= inv
		norm += float64(dst[j]) * float64(dst[j])
	}
	if norm == 0 {
		return
	}
	scale := float32(1 / math.Sqrt(norm))
	for j := range dst {
		dst[j] *= scale
	}
}

// group is the indices of texts encoded in one call, and their padded length.
type group struct {
	idx    []int
	maxLen int
}

// groupByLength splits texts (given their token counts, visited in ascending
// order) into encoder calls so that padding stays within maxWaste of the
// real tokens and no call exceeds maxTokens padded tokens. order must list
// the indices sorted by ascending lens.
func groupByLength(order, lens []int, maxWaste float64, maxTokens int) []group {
	var groups []group
	for i := 0; i < len(order); {
		j, real := i+1, lens[order[i]]
		for j < len(order) {
			l := lens[order[j]]
			padded := l * (j - i + 1)
			if padded > maxTokens || float64(padded) > (1+maxWaste)*float64(real+l) {
				break
			}
			real += l
			j++
		}
		groups = append(groups, group{idx: order[i:j], maxLen: lens[order[j-1]]})
		i = j
	}
	return groups
}
