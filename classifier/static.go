package classifier

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// Band is the interval of the static stage's P(slow) inside which it defers
// to the encoder: the static stage decides a text when its P(slow) is below
// Lo or above Hi. The notebook chooses it on validation rows and writes it
// into the manifest; [0, 1] means the static stage never decides.
type Band struct {
	Lo, Hi float64
}

// Decides reports whether the static stage's p is outside the band, i.e.
// whether its Result stands without the encoder.
func (b Band) Decides(p float32) bool { return float64(p) < b.Lo || float64(p) > b.Hi }

// Validate checks 0 ≤ Lo ≤ Hi ≤ 1.
func (b Band) Validate() error {
	if !(b.Lo >= 0 && b.Lo <= b.Hi && b.Hi <= 1) {
		return fmt.Errorf("band [%g, %g]: want 0 <= lo <= hi <= 1", b.Lo, b.Hi)
	}
	return nil
}

// Static table formats (manifest static.table_format). All little-endian.
const (
	// formatInt8 is vocab×dim int8 values row-major, then vocab float32
	// scales: the piece vector is float32(q) × scale of its row.
	formatInt8 = "int8_row_scale"
	formatFP16 = "float16"
	formatFP32 = "float32"
	featStatic = "static_mean_l2"
	// featLongTable is the long head's own vector: featStatic's pooling over its table.
	featLongTable = "long_table_mean_l2"
	// featFirstSentence is featStatic over a text's first sentence (FirstSentence).
	featFirstSentence = "first_sentence_mean_l2"
	// firstSentenceMaxPieces bounds static.first_sentence.max_pieces.
	firstSentenceMaxPieces = 4096
	staticMaxID            = 1 << 24 // sanity bound on the vocabulary size

	poolMean         = "mean"
	poolWeightedMean = "weighted_mean"
)

// Static is the first stage: one vector per word piece distilled from the
// encoder, mean over a text's pieces (weighted per piece when the manifest
// says weighted_mean), L2, then a logistic regression. It
// runs no ONNX Runtime call. It is immutable after LoadStatic and safe for
// concurrent use without locking.
type Static struct {
	vocab, dim int
	table      pieceTable
	// kw is each piece's weight in the mean (vocab values): its piece weight under
	// weighted_mean, else 1, and 0 for the ids left out ([CLS], [SEP]). A piece of weight 0
	// is not kept.
	kw     []float32
	w      []float32 // dim weights, then has_context's
	bias   float32
	band   Band
	inBand *inBandHead // nil: the manifest has none
	long   *longHead   // nil: the manifest has none
}

// longHead is the manifest's long head, for a text without a context and more than after
// kept pieces: dim weights for the vector pooled over its table (the static table when it
// has none of its own, format 4), dim for its first sentence's static vector when it reads
// one (format 6), then has_context's (0 when unused).
type longHead struct {
	w     []float32
	bias  float32
	after int
	table *pieceTable // nil: the static table
	// first is non-nil when the head reads the static vector of the text's first sentence
	// (format 6): its dim weights then follow the vector's, before has_context's.
	first *firstSentence
}

// firstSentence is static.first_sentence as flags per piece id.
type firstSentence struct {
	flags     []uint8 // vocab values: sentEnd, sentNotAfter, sentNotBefore
	maxPieces int
}

const (
	sentEnd       = 1 << iota // the piece may end a sentence
	sentNotAfter              // an end right after this piece is none ("dr.", "u.s.")
	sentNotBefore             // an end right before this piece is none ("3.5", "https://")
)

// newFirstSentence builds the flags; validate checked every id against the vocabulary.
func newFirstSentence(fs *FirstSentence, vocab int) *firstSentence {
	f := &firstSentence{flags: make([]uint8, vocab), maxPieces: fs.MaxPieces}
	for _, set := range []struct {
		ids  []uint32
		flag uint8
	}{{fs.EndIDs, sentEnd}, {fs.NotAfterIDs, sentNotAfter}, {fs.NotBeforeIDs, sentNotBefore}} {
		for _, id := range set.ids {
			f.flags[id] |= set.flag
		}
	}
	return f
}

// of returns ids up to and including its first sentence's end ([CLS] ids[0] first), or all
// of ids when it has none within maxPieces pieces or the end is its last piece; the
// notebook's first_sentence. An id outside the vocabulary ends nothing (embed reports it).
func (f *firstSentence) of(ids []uint32) []uint32 {
	flag := func(id uint32) uint8 {
		if int(id) < len(f.flags) {
			return f.flags[id]
		}
		return 0
	}
	for j := 1; j < min(len(ids)-1, f.maxPieces+1); j++ {
		if flag(ids[j])&sentEnd != 0 && flag(ids[j-1])&sentNotAfter == 0 && flag(ids[j+1])&sentNotBefore == 0 {
			return ids[:j+1]
		}
	}
	return ids
}

// pieceTable is one vector per word piece, vocab×dim, in one of the table formats.
type pieceTable struct {
	q     []int8    // int8 format: vocab×dim
	scale []float32 // int8 format: vocab
	f     []float32 // float formats, widened to float32 at load: vocab×dim
}

// inBandHead is the manifest's in-band head: dim weights for the static vector,
// dim for the first k kept pieces' vector, then has_context's (0 when unused).
type inBandHead struct {
	w    []float32
	bias float32
	k    int
}

// staticHead is static_head.json.
type staticHead struct {
	Features []string  `json:"features"`
	Weights  []float32 `json:"weights"`
	Bias     *float32  `json:"bias"`
}

// LoadStatic reads and checks the static table and head named in m.Static
// (and its piece weights, for weighted_mean) from dir (the model directory),
// every failure naming the file; it also returns their sha256s (table, head, weights,
// then the in-band head, the long head and its table where the manifest has them), for
// Manifest.ContentVersion. m must have a static section. The caller checks Vocab against
// its tokenizer.
func LoadStatic(dir string, m *Manifest) (*Static, []string, error) {
	sm := m.Static
	s := &Static{vocab: sm.Vocab, dim: sm.Dim, band: Band{Lo: sm.Band[0], Hi: sm.Band[1]}}
	table, tableSHA, err := loadTable("static table", filepath.Join(dir, sm.TableFile), sm.TableSHA256, sm)
	if err != nil {
		return nil, nil, err
	}
	s.table = table

	var weightsSHA string
	if sm.Pooling == poolWeightedMean {
		if s.kw, weightsSHA, err = loadPieceWeights(dir, sm); err != nil {
			return nil, nil, err
		}
	} else {
		s.kw = make([]float32, sm.Vocab)
		for i := range s.kw {
			s.kw[i] = 1
		}
	}
	for _, id := range sm.DropIDs {
		if int(id) < sm.Vocab {
			s.kw[id] = 0
		}
	}

	h, headSHA, err := readHead("static head", filepath.Join(dir, sm.HeadFile), sm.HeadSHA256, sm.Features, sm.Dim)
	if err != nil {
		return nil, nil, err
	}
	s.w, s.bias = h.weights(), *h.Bias
	shas := []string{tableSHA, headSHA}
	if weightsSHA != "" {
		shas = append(shas, weightsSHA)
	}
	if sm.InBandHeadFile != "" {
		ib, sha, err := loadInBandHead(dir, sm)
		if err != nil {
			return nil, nil, err
		}
		s.inBand = ib
		shas = append(shas, sha)
	}
	if sm.LongHeadFile != "" {
		h, sha, err := readHead("static long head", filepath.Join(dir, sm.LongHeadFile), sm.LongHeadSHA256, sm.LongFeatures, sm.Dim)
		if err != nil {
			return nil, nil, err
		}
		s.long = &longHead{w: h.weights(), bias: *h.Bias, after: sm.LongAfter}
		if sm.FirstSentence != nil {
			s.long.first = newFirstSentence(sm.FirstSentence, sm.Vocab)
		}
		shas = append(shas, sha)
		if sm.LongTableFile != "" {
			t, sha, err := loadTable("static long table", filepath.Join(dir, sm.LongTableFile), sm.LongTableSHA256, sm)
			if err != nil {
				return nil, nil, err
			}
			s.long.table = &t
			shas = append(shas, sha)
		}
	}
	return s, shas, nil
}

// loadTable reads a table file (what names it in errors) in sm's format and shape, checked
// against wantSHA; it returns the table and the file's sha256.
func loadTable(what, path, wantSHA string, sm *StaticManifest) (pieceTable, string, error) {
	var t pieceTable
	raw, sha, err := readChecked(what, path, wantSHA)
	if err != nil {
		return t, "", err
	}
	n := sm.Vocab * sm.Dim
	switch sm.TableFormat {
	case formatInt8:
		if len(raw) != n+4*sm.Vocab {
			return t, "", fmt.Errorf("%s %s: %d bytes, want %d for %d×%d int8 and %d float32 scales", what, path, len(raw), n+4*sm.Vocab, sm.Vocab, sm.Dim, sm.Vocab)
		}
		// The int8 values are the file's bytes: view them in place rather
		// than copy, so loading holds the table once (11 MiB, not 22).
		t.q = unsafe.Slice((*int8)(unsafe.Pointer(unsafe.SliceData(raw))), n)
		t.scale = make([]float32, sm.Vocab)
		for i := range t.scale {
			t.scale[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[n+4*i:]))
		}
	case formatFP16:
		if len(raw) != 2*n {
			return t, "", fmt.Errorf("%s %s: %d bytes, want %d for %d×%d float16", what, path, len(raw), 2*n, sm.Vocab, sm.Dim)
		}
		t.f = make([]float32, n)
		for i := range t.f {
			t.f[i] = float16to32(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case formatFP32:
		if len(raw) != 4*n {
			return t, "", fmt.Errorf("%s %s: %d bytes, want %d for %d×%d float32", what, path, len(raw), 4*n, sm.Vocab, sm.Dim)
		}
		t.f = make([]float32, n)
		for i := range t.f {
			t.f[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return t, sha, nil
}

// readChecked reads a model file (what names it in errors) whose sha256 must be wantSHA,
// and returns its bytes and sha256.
func readChecked(what, path, wantSHA string) ([]byte, string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	sha := sha256Hex(raw)
	if sha != wantSHA {
		return nil, "", fmt.Errorf("%s %s: sha256 %s does not match the manifest's %s", what, path, sha, wantSHA)
	}
	return raw, sha, nil
}

// weights is the head's weights with has_context's last: 0 when the head does not read
// it, which keeps the scoring arithmetic uniform.
func (h staticHead) weights() []float32 {
	if slices.Contains(h.Features, FeatureHasContext) {
		return h.Weights
	}
	return append(h.Weights, 0)
}

// readHead reads a head file (what names it in errors), checked against the manifest's
// sha256 and features, with one weight per feature value (dim for a vector) and a bias.
func readHead(what, path, wantSHA string, features []string, dim int) (staticHead, string, error) {
	var h staticHead
	raw, sha, err := readChecked(what, path, wantSHA)
	if err != nil {
		return h, "", err
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, "", fmt.Errorf("%s %s: invalid JSON: %w", what, path, err)
	}
	if !slices.Equal(h.Features, features) {
		return h, "", fmt.Errorf("%s %s: features %q, the manifest says %q", what, path, h.Features, features)
	}
	if want := staticFeatureDim(features, dim); len(h.Weights) != want || h.Bias == nil {
		return h, "", fmt.Errorf("%s %s: %d weights and bias %v, want %d weights and a bias", what, path, len(h.Weights), h.Bias != nil, want)
	}
	return h, sha, nil
}

// loadInBandHead reads static.in_band_head_file, checked against the manifest.
func loadInBandHead(dir string, sm *StaticManifest) (*inBandHead, string, error) {
	h, sha, err := readHead("static in-band head", filepath.Join(dir, sm.InBandHeadFile), sm.InBandHeadSHA256, sm.InBandFeatures, sm.Dim)
	if err != nil {
		return nil, "", err
	}
	k, _ := firstKFeature(h.Features[1]) // validate checked the order and the name
	return &inBandHead{w: h.weights(), bias: *h.Bias, k: k}, sha, nil
}

// firstKFeature parses the in-band head's "first<k>_mean_l2": the pooled vector of a
// text's first k kept pieces, k in [1, 64].
func firstKFeature(f string) (int, bool) {
	rest, ok := strings.CutPrefix(f, "first")
	if !ok {
		return 0, false
	}
	num, ok := strings.CutSuffix(rest, "_mean_l2")
	if !ok {
		return 0, false
	}
	k, err := strconv.Atoi(num)
	if err != nil || k < 1 || k > 64 || strconv.Itoa(k) != num {
		return 0, false
	}
	return k, true
}

// loadPieceWeights reads static.weights_file: vocab float32 values, each finite and >= 0.
func loadPieceWeights(dir string, sm *StaticManifest) ([]float32, string, error) {
	path := filepath.Join(dir, sm.WeightsFile)
	raw, sha, err := readChecked("static piece weights", path, sm.WeightsSHA256)
	if err != nil {
		return nil, "", err
	}
	if len(raw) != 4*sm.Vocab {
		return nil, "", fmt.Errorf("static piece weights %s: %d bytes, want %d for %d float32 weights", path, len(raw), 4*sm.Vocab, sm.Vocab)
	}
	w := make([]float32, sm.Vocab)
	for i := range w {
		w[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		if !(w[i] >= 0) || math.IsInf(float64(w[i]), 1) {
			return nil, "", fmt.Errorf("static piece weights %s: weight %d is %g, want a finite value >= 0", path, i, w[i])
		}
	}
	return w, sha, nil
}

func staticFeatureDim(features []string, dim int) int {
	n := 0
	for _, f := range features {
		switch _, firstK := firstKFeature(f); {
		case f == featStatic, f == featLongTable, f == featFirstSentence, firstK:
			n += dim
		case f == FeatureHasContext:
			n++
		}
	}
	return n
}

// Vocab is the number of rows of the table: the tokenizer's vocabulary size
// it was distilled with.
func (s *Static) Vocab() int { return s.vocab }

// Band is the manifest's band: the static P(slow) decides a text outside it.
func (s *Static) Band() Band { return s.band }

// Score returns P(slow) for one text's token ids (as the tokenizer gave
// them, [CLS] and [SEP] included; sep is the tokenizer's [SEP] id, for
// has_context). It allocates one dim-sized scratch vector (two for a text
// the long head scores with its first sentence). An id outside the
// table is an error. The arithmetic mirrors the notebook's static_p_ref:
// float32 sums in token order (each row times its piece weight under
// weighted_mean), divided by the count (or the sum of the weights), an L2
// norm in float64, then a float64 dot product. A text whose kept pieces all
// weigh 0 has no vector: the bias and has_context alone decide it. With a
// long head, a text without a context and with more kept pieces than its
// long_after is scored on it instead of the static head, its vector pooled
// over the long head's own table when it has one, beside the static vector of
// the text's first sentence when the head reads it (scoreLong).
func (s *Static) Score(ids []uint32, sep uint32) (float32, error) {
	hc := HasContext(ids, sep)
	// A text of at most long_after ids cannot have more kept pieces: it skips the count.
	if s.long != nil && hc == 0 && len(ids) > s.long.after {
		kept, err := s.kept(ids)
		if err != nil {
			return 0, err
		}
		if kept > s.long.after {
			return s.scoreLong(ids)
		}
	}
	v := make([]float32, s.dim)
	if _, err := s.embed(&s.table, ids, 0, v); err != nil {
		return 0, err
	}
	return logistic(s.w, s.bias, hc, v), nil
}

// scoreLong is Score on the long head, for a text without a context: its vector over the
// long head's table (the static table without one), then, when the head reads it, the
// static vector of the text's first sentence. The notebook's static_p_ref.
func (s *Static) scoreLong(ids []uint32) (float32, error) {
	h, t := s.long, &s.table
	if h.table != nil {
		t = h.table
	}
	v := make([]float32, s.dim)
	if _, err := s.embed(t, ids, 0, v); err != nil {
		return 0, err
	}
	if h.first == nil {
		return logistic(h.w, h.bias, 0, v), nil
	}
	f := make([]float32, s.dim)
	if _, err := s.embed(&s.table, h.first.of(ids), 0, f); err != nil {
		return 0, err
	}
	z := float64(h.bias) + dot(h.w[:s.dim], v) + dot(h.w[s.dim:2*s.dim], f)
	return float32(1 / (1 + math.Exp(-z))), nil
}

// logistic is the sigmoid of w's dot product with v (dim values) and has_context hc (w's
// last weight), plus bias.
func logistic(w []float32, bias, hc float32, v []float32) float32 {
	z := float64(bias) + float64(w[len(v)])*float64(hc) + dot(w[:len(v)], v)
	return float32(1 / (1 + math.Exp(-z)))
}

// HasLongHead reports whether the model has a long head (Score uses it for long texts
// without a context).
func (s *Static) HasLongHead() bool { return s.long != nil }

// HasInBandHead reports whether the model has an in-band head (ScoreInBand).
func (s *Static) HasInBandHead() bool { return s.inBand != nil }

// ScoreInBand is P(slow) from the in-band head, for a text inside the band that the
// first stage must decide after all (load, a failed encoder): the static vector as in
// Score, the same pooling over the text's first k kept pieces, has_context; the notebook's
// in_band_p_ref. Without an in-band head it is Score. It decides a text the long head
// scores too: inside the band it was right more often on the test split than the long head
// (docs/classifier.md). Two dim-sized scratch vectors.
func (s *Static) ScoreInBand(ids []uint32, sep uint32) (float32, error) {
	if s.inBand == nil {
		return s.Score(ids, sep)
	}
	v, f := make([]float32, s.dim), make([]float32, s.dim)
	if _, err := s.embed(&s.table, ids, 0, v); err != nil {
		return 0, err
	}
	if _, err := s.embed(&s.table, ids, s.inBand.k, f); err != nil {
		return 0, err
	}
	w := s.inBand.w
	z := float64(s.inBand.bias) + float64(w[2*s.dim])*float64(HasContext(ids, sep)) +
		dot(w[:s.dim], v) + dot(w[s.dim:2*s.dim], f)
	return float32(1 / (1 + math.Exp(-z))), nil
}

// kept returns how many of ids' pieces the static vector reads (embed's count, without
// the pooling): the long head's gate.
func (s *Static) kept(ids []uint32) (int, error) {
	kept := 0
	for _, id := range ids {
		wt, err := s.weight(id)
		if err != nil {
			return 0, err
		}
		if wt != 0 {
			kept++
		}
	}
	return kept, nil
}

// weight is a piece's weight in the mean (kw); an id outside the table is an error.
func (s *Static) weight(id uint32) (float32, error) {
	if int(id) >= s.vocab {
		return 0, s.outside(id)
	}
	return s.kw[id], nil
}

func (s *Static) outside(id uint32) error {
	return fmt.Errorf("token id %d outside the static table's vocabulary of %d", id, s.vocab)
}

// embed writes into acc (dim values, zeroed) the L2-normalised (weighted) mean of
// t's rows of ids' kept pieces: all of them, or the first limit when limit > 0, and
// returns how many it read. A piece is kept unless it is dropped ([CLS], [SEP]) or
// weighs 0. acc stays zero when none is kept.
func (s *Static) embed(t *pieceTable, ids []uint32, limit int, acc []float32) (int, error) {
	var total float32
	kept := 0
	for _, id := range ids {
		wt, err := s.weight(id)
		if err != nil {
			return 0, err
		}
		if wt == 0 {
			continue
		}
		if limit > 0 && kept == limit {
			break
		}
		kept++
		total += wt
		off := int(id) * s.dim
		// a has row's length, so the compiler drops the bounds checks.
		if t.q != nil {
			addScaled(acc, t.q[off:off+s.dim], t.scale[id]*wt)
		} else {
			row := t.f[off : off+s.dim]
			a := acc[:len(row)]
			for j, v := range row {
				a[j] += v * wt
			}
		}
	}
	if total == 0 {
		return kept, nil
	}
	var norm float64
	for j := range acc {
		acc[j] /= total
		norm += float64(acc[j]) * float64(acc[j])
	}
	if norm > 0 {
		scale := float32(1 / math.Sqrt(norm))
		for j, v := range acc {
			acc[j] = v * scale
		}
	}
	return kept, nil
}

// addScaled adds row times sc to acc (at least as long as row), element by element: each
// acc[j] gets float32(row[j])*sc added, rounded to float32, exactly as a plain loop does (Go
// fuses no multiply-add on amd64 unless asked), so the static P(slow) keeps its parity with
// the notebook. On a CPU with AVX2 eight lanes at a time do the same two roundings
// (addScaledAVX2): a 384-value row costs about a fifth of the scalar loop
// (BenchmarkAddScaled), and TestAddScaledSameBits holds the two to the same bits.
func addScaled(acc []float32, row []int8, sc float32) {
	a := acc[:len(row)]
	if n := len(row) &^ 7; hasAVX2 && n > 0 {
		addScaledAVX2(&a[0], &row[0], n, sc)
		addScaledGo(a[n:], row[n:], sc)
		return
	}
	addScaledGo(a, row, sc)
}

// addScaledGo is addScaled without vector instructions. Eight at a time, the loop's bounds
// checks and counter cost a fifth as much.
func addScaledGo(acc []float32, row []int8, sc float32) {
	a := acc[:len(row)]
	j := 0
	for ; j+8 <= len(row); j += 8 {
		r, x := row[j:j+8:j+8], a[j:j+8:j+8]
		x[0] += int8f[uint8(r[0])] * sc
		x[1] += int8f[uint8(r[1])] * sc
		x[2] += int8f[uint8(r[2])] * sc
		x[3] += int8f[uint8(r[3])] * sc
		x[4] += int8f[uint8(r[4])] * sc
		x[5] += int8f[uint8(r[5])] * sc
		x[6] += int8f[uint8(r[6])] * sc
		x[7] += int8f[uint8(r[7])] * sc
	}
	for ; j < len(row); j++ {
		a[j] += int8f[uint8(row[j])] * sc
	}
}

// int8f[uint8(v)] is float32(v): a load, where the conversion instruction waits on the
// register it writes.
var int8f = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(int8(uint8(i)))
	}
	return t
}()

// dot is the float64 dot product of w and v (same length).
func dot(w, v []float32) float64 {
	var z float64
	for j, x := range v[:len(w)] {
		z += float64(w[j]) * float64(x)
	}
	return z
}

// HasContext is the has_context feature of one text's ids: 1 when they hold
// the instruction/context separator, i.e. more [SEP] tokens than the final
// one, else 0. Both heads read it.
func HasContext(ids []uint32, sep uint32) float32 {
	n := 0
	for _, id := range ids {
		if id == sep {
			n++
		}
	}
	if n > 1 {
		return 1
	}
	return 0
}

// float16to32 widens an IEEE 754 half-precision value.
func float16to32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: renormalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// validate checks the manifest's static section under manifest format version.
func (sm *StaticManifest) validate(version int) error {
	var errs []error
	if sm.TableFile == "" || sm.HeadFile == "" || sm.TableSHA256 == "" || sm.HeadSHA256 == "" {
		errs = append(errs, errors.New("static.table_file, table_sha256, head_file and head_sha256: must not be empty"))
	}
	if !slices.Contains([]string{formatInt8, formatFP16, formatFP32}, sm.TableFormat) {
		errs = append(errs, fmt.Errorf("static.table_format: want %q, %q or %q, got %q", formatInt8, formatFP16, formatFP32, sm.TableFormat))
	}
	if sm.Vocab < 1 || sm.Vocab > staticMaxID {
		errs = append(errs, fmt.Errorf("static.vocab: must be in [1, %d], got %d", staticMaxID, sm.Vocab))
	}
	if sm.Dim < 1 || sm.Dim > 1<<16 {
		errs = append(errs, fmt.Errorf("static.dim: must be in [1, 65536], got %d", sm.Dim))
	}
	switch {
	case sm.Pooling == poolMean:
		if sm.WeightsFile != "" {
			errs = append(errs, fmt.Errorf("static.weights_file: %q is only read with pooling %q, the manifest says %q", sm.WeightsFile, poolWeightedMean, poolMean))
		}
	case sm.Pooling == poolWeightedMean && version >= formatV2:
		if sm.WeightsFile == "" || sm.WeightsSHA256 == "" {
			errs = append(errs, fmt.Errorf("static.weights_file and static.weights_sha256: required with pooling %q", poolWeightedMean))
		}
	case sm.Pooling == poolWeightedMean:
		errs = append(errs, fmt.Errorf("static.pooling %q needs format_version %d, the manifest says %d", poolWeightedMean, formatV2, version))
	default:
		errs = append(errs, fmt.Errorf("static.pooling: want %q or %q, got %q", poolMean, poolWeightedMean, sm.Pooling))
	}
	if sm.Normalize != "l2" {
		errs = append(errs, fmt.Errorf("static.normalize: only \"l2\" is supported, got %q", sm.Normalize))
	}
	if len(sm.Features) == 0 || sm.Features[0] != featStatic {
		errs = append(errs, fmt.Errorf("static.features: must start with %q, got %q", featStatic, sm.Features))
	}
	for _, f := range sm.Features {
		if f != featStatic && f != FeatureHasContext {
			errs = append(errs, fmt.Errorf("static.features: unknown feature %q", f))
		}
	}
	if sm.InBandHeadFile != "" || sm.InBandHeadSHA256 != "" || len(sm.InBandFeatures) > 0 {
		errs = append(errs, sm.validateInBand(version))
	}
	if sm.LongHeadFile != "" || sm.LongHeadSHA256 != "" || len(sm.LongFeatures) > 0 || sm.LongAfter != 0 ||
		sm.LongTableFile != "" || sm.LongTableSHA256 != "" || sm.FirstSentence != nil {
		errs = append(errs, sm.validateLong(version))
	}
	if len(sm.Band) != 2 {
		errs = append(errs, fmt.Errorf("static.band: want [lo, hi], got %v", sm.Band))
	} else if err := (Band{Lo: sm.Band[0], Hi: sm.Band[1]}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("static.%w", err))
	}
	return errors.Join(errs...)
}

// validateInBand checks the in-band head's part of the static section.
func (sm *StaticManifest) validateInBand(version int) error {
	if version < formatV3 {
		return fmt.Errorf("static.in_band_head_file needs format_version %d, the manifest says %d", formatV3, version)
	}
	if sm.InBandHeadFile == "" || sm.InBandHeadSHA256 == "" {
		return errors.New("static.in_band_head_file and in_band_head_sha256: both or neither")
	}
	f := sm.InBandFeatures
	ok := len(f) >= 2 && len(f) <= 3 && f[0] == featStatic && (len(f) == 2 || f[2] == FeatureHasContext)
	if ok {
		_, ok = firstKFeature(f[1])
	}
	if !ok {
		return fmt.Errorf("static.in_band_features: want [%q, \"first<k>_mean_l2\" with k in [1, 64], %q (optional)], got %q", featStatic, FeatureHasContext, f)
	}
	return nil
}

// validateFirstSentence checks static.first_sentence.
func (sm *StaticManifest) validateFirstSentence(version int) error {
	if version < formatV6 {
		return fmt.Errorf("static.first_sentence needs format_version %d, the manifest says %d", formatV6, version)
	}
	fs, errs := sm.FirstSentence, []error(nil)
	if len(fs.EndIDs) == 0 {
		errs = append(errs, errors.New("static.first_sentence.end_ids: must not be empty"))
	}
	for _, set := range []struct {
		name string
		ids  []uint32
	}{{"end_ids", fs.EndIDs}, {"not_after_ids", fs.NotAfterIDs}, {"not_before_ids", fs.NotBeforeIDs}} {
		for _, id := range set.ids {
			if int(id) >= sm.Vocab {
				errs = append(errs, fmt.Errorf("static.first_sentence.%s: id %d outside the vocabulary of %d", set.name, id, sm.Vocab))
				break
			}
		}
	}
	if fs.MaxPieces < 1 || fs.MaxPieces > firstSentenceMaxPieces {
		errs = append(errs, fmt.Errorf("static.first_sentence.max_pieces: must be in [1, %d], got %d", firstSentenceMaxPieces, fs.MaxPieces))
	}
	return errors.Join(errs...)
}

// validateLong checks the long head's part of the static section.
func (sm *StaticManifest) validateLong(version int) error {
	if version < formatV4 {
		return fmt.Errorf("static.long_head_file needs format_version %d, the manifest says %d", formatV4, version)
	}
	var errs []error
	if sm.LongHeadFile == "" || sm.LongHeadSHA256 == "" {
		errs = append(errs, errors.New("static.long_head_file and long_head_sha256: both or neither"))
	}
	vec := featStatic // the long head's vector: the static table's, or its own table's
	if sm.LongTableFile != "" || sm.LongTableSHA256 != "" {
		vec = featLongTable
		switch {
		case version < formatV5:
			errs = append(errs, fmt.Errorf("static.long_table_file needs format_version %d, the manifest says %d", formatV5, version))
		case sm.LongTableFile == "" || sm.LongTableSHA256 == "":
			errs = append(errs, errors.New("static.long_table_file and long_table_sha256: both or neither"))
		}
	}
	want := []string{vec}
	if sm.FirstSentence != nil {
		want = append(want, featFirstSentence)
		errs = append(errs, sm.validateFirstSentence(version))
	}
	if f := sm.LongFeatures; !slices.Equal(f, want) && !slices.Equal(f, append(want, FeatureHasContext)) {
		errs = append(errs, fmt.Errorf("static.long_features: want %q, then %q (optional), got %q", want, FeatureHasContext, f))
	}
	if sm.LongAfter < 0 || sm.LongAfter > staticMaxID {
		errs = append(errs, fmt.Errorf("static.long_after: must be in [0, %d], got %d", staticMaxID, sm.LongAfter))
	}
	return errors.Join(errs...)
}
