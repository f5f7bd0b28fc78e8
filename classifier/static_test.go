package classifier

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// loadStage loads the static stage of the model in dir as a model does: manifest, then table
// and head.
func loadStage(dir string) (*Static, []string, error) {
	m, err := LoadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	return LoadStatic(dir, m)
}

// TestShippedStaticStage: the shipped table loads with the notebook's band, and Decides is
// strict at both ends.
func TestShippedStaticStage(t *testing.T) {
	dir := filepath.Join(repo, "models")
	m, err := LoadManifest(dir)
	require.NoError(t, err)
	s, shas, err := LoadStatic(dir, m)
	require.NoError(t, err)
	want := []string{m.Static.TableSHA256, m.Static.HeadSHA256}
	if m.Static.Pooling == poolWeightedMean {
		want = append(want, m.Static.WeightsSHA256)
	}
	if m.Static.InBandHeadFile != "" {
		want = append(want, m.Static.InBandHeadSHA256)
	}
	if m.Static.LongHeadFile != "" {
		want = append(want, m.Static.LongHeadSHA256)
	}
	if m.Static.LongTableFile != "" {
		want = append(want, m.Static.LongTableSHA256)
	}
	require.Equal(t, want, shas)
	require.Equal(t, m.Static.InBandHeadFile != "", s.HasInBandHead())
	require.Equal(t, m.Static.LongHeadFile != "", s.HasLongHead())
	require.Equal(t, m.Static.Vocab, s.Vocab())
	b := s.Band()
	require.Equal(t, Band{Lo: m.Static.Band[0], Hi: m.Static.Band[1]}, b)
	require.NoError(t, b.Validate())
	require.Less(t, b.Lo, 0.5)
	require.Greater(t, b.Hi, 0.5)

	_, err = s.Score([]uint32{101, uint32(s.Vocab()), 102}, 102)
	require.ErrorContains(t, err, "outside the static table's vocabulary")
}

func TestBandDecides(t *testing.T) {
	require.True(t, Band{0.1, 0.9}.Decides(0.05))
	require.True(t, Band{0.1, 0.9}.Decides(0.95))
	require.False(t, Band{0.1, 0.9}.Decides(0.1))
	require.False(t, Band{0.1, 0.9}.Decides(0.5))
	require.False(t, Band{0, 1}.Decides(0), "[0, 1] never decides")
	require.False(t, Band{0, 1}.Decides(1))
	require.Error(t, Band{0.6, 0.4}.Validate())
	require.Error(t, Band{-0.1, 0.9}.Validate())
}

// TestStaticTableFormats decodes one small table written in each format and scores with it:
// every format gives the mean of the kept rows, L2-normalised, through the head, with
// has_context from the separators.
func TestStaticTableFormats(t *testing.T) {
	// Rows of a 3-piece vocabulary, dim 2; piece 2 is the separator and left out of the mean.
	rows := [][2]float32{{1, 0}, {0, 2}, {-1, 1}}
	const sep = 2
	encode := map[string]func() []byte{
		formatFP32: func() []byte {
			var b []byte
			for _, r := range rows {
				for _, v := range r {
					b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
				}
			}
			return b
		},
		formatFP16: func() []byte {
			half := map[float32]uint16{0: 0, 1: 0x3c00, 2: 0x4000, -1: 0xbc00}
			var b []byte
			for _, r := range rows {
				for _, v := range r {
					b = binary.LittleEndian.AppendUint16(b, half[v])
				}
			}
			return b
		},
		formatInt8: func() []byte {
			// Each row scaled so its largest magnitude is 127.
			q := []int8{127, 0, 0, 127, -127, 127}
			b := make([]byte, 0, len(q)+4*len(rows))
			for _, v := range q {
				b = append(b, byte(v))
			}
			for _, sc := range []float32{1.0 / 127, 2.0 / 127, 1.0 / 127} {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(sc))
			}
			return b
		},
	}
	head, err := json.Marshal(map[string]any{"features": []string{featStatic, FeatureHasContext}, "weights": []float32{1, -1, 0.5}, "bias": 0.25})
	require.NoError(t, err)
	// Pieces 0 and 1 kept, mean (0.5, 1), unit (1, 2)/√5; two separators: has_context 1.
	z := 0.25 + (1-2)/math.Sqrt(5) + 0.5
	want := 1 / (1 + math.Exp(-z))
	// The in-band head reads the first kept piece too: row 0, unit (1, 0).
	inBand, err := json.Marshal(map[string]any{"features": []string{featStatic, "first1_mean_l2", FeatureHasContext},
		"weights": []float32{1, -1, 2, 0, 0.5}, "bias": -0.25})
	require.NoError(t, err)
	zIB := -0.25 + (1-2)/math.Sqrt(5) + 2 + 0.5
	wantIB := 1 / (1 + math.Exp(-zIB))

	for format, enc := range encode {
		t.Run(format, func(t *testing.T) {
			dir := copyDir(t, filepath.Join(repo, "models"))
			table := enc()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "static_table.bin"), table, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "static_head.json"), head, 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "static_in_band_head.json"), inBand, 0o644))
			editManifest(t, dir, func(m map[string]any) {
				m["format_version"] = 3
				s := m["static"].(map[string]any)
				s["table_format"], s["vocab"], s["dim"], s["drop_ids"] = format, 3, 2, []int{sep}
				s["table_sha256"], s["head_sha256"] = sha256Hex(table), sha256Hex(head)
				s["in_band_head_file"], s["in_band_head_sha256"] = "static_in_band_head.json", sha256Hex(inBand)
				s["in_band_features"] = []string{featStatic, "first1_mean_l2", FeatureHasContext}
				s["pooling"] = "mean" // every kept piece counts once
				delete(s, "weights_file")
				for _, k := range []string{"long_head_file", "long_head_sha256", "long_features", "long_after",
					"long_table_file", "long_table_sha256", "first_sentence"} {
					delete(s, k) // a format-4, -5 or -6 field; the shipped long head is for 384 dims
				}
			})
			s, _, err := loadStage(dir)
			require.NoError(t, err)
			require.Equal(t, 3, s.Vocab())
			p, err := s.Score([]uint32{0, sep, 1, sep}, sep)
			require.NoError(t, err)
			require.InDelta(t, want, p, 1e-6)
			p, err = s.ScoreInBand([]uint32{0, sep, 1, sep}, sep)
			require.NoError(t, err)
			require.InDelta(t, wantIB, p, 1e-6)
			p, err = s.ScoreInBand([]uint32{sep}, sep)
			require.NoError(t, err)
			require.InDelta(t, 1/(1+math.Exp(0.25)), p, 1e-6, "in-band head, no kept piece: its bias alone")
			p, err = s.Score([]uint32{sep}, sep)
			require.NoError(t, err)
			require.InDelta(t, 1/(1+math.Exp(-0.25)), p, 1e-6, "no kept piece: the bias alone")
		})
	}
}

func TestHasContext(t *testing.T) {
	require.Equal(t, float32(0), HasContext([]uint32{101, 5, 102}, 102))
	require.Equal(t, float32(1), HasContext([]uint32{101, 5, 102, 6, 102}, 102))
	require.Equal(t, float32(0), HasContext(nil, 102))
}

func TestStaticLoadErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir string)
		want   []string
	}{
		{"corrupt table", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "static_table.bin"), []byte("garbage"), 0o644))
		}, []string{"static table", "static_table.bin", "sha256"}},
		{"short table with matching sha", func(t *testing.T, dir string) {
			b := []byte("garbage")
			require.NoError(t, os.WriteFile(filepath.Join(dir, "static_table.bin"), b, 0o644))
			editManifest(t, dir, func(m map[string]any) { m["static"].(map[string]any)["table_sha256"] = sha256Hex(b) })
		}, []string{"static table", "7 bytes"}},
		{"head with too few weights", func(t *testing.T, dir string) {
			b := []byte(`{"features": ["static_mean_l2", "has_context"], "weights": [1, 2], "bias": 0.5}`)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "static_head.json"), b, 0o644))
			editManifest(t, dir, func(m map[string]any) { m["static"].(map[string]any)["head_sha256"] = sha256Hex(b) })
		}, []string{"static head", "2 weights", "want 385"}},
		{"inverted band", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["static"].(map[string]any)["band"] = []float64{0.9, 0.1} })
		}, []string{"static.band", "0.9"}},
		{"unknown table format", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["static"].(map[string]any)["table_format"] = "int4" })
		}, []string{"static.table_format", "int4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, filepath.Join(repo, "models"))
			tc.mutate(t, dir)
			_, _, err := loadStage(dir)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestFloat16(t *testing.T) {
	for h, want := range map[uint16]float32{
		0x0000: 0, 0x3c00: 1, 0xc000: -2, 0x3555: 0.33325195, 0x7bff: 65504,
		0x0001: 5.9604645e-08, 0x0400: 6.1035156e-05, 0x03ff: 6.097555e-05,
	} {
		require.Equalf(t, want, float16to32(h), "%#04x", h)
	}
	require.True(t, math.IsInf(float64(float16to32(0x7c00)), 1))
	require.True(t, math.IsNaN(float64(float16to32(0x7e00))))
}

// writePieceWeights writes w as static_piece_weights.bin in dir and points a format-2
// manifest's static section at it with pooling weighted_mean.
// withLongTable gives the toy model in dir (4 pieces, dim 2, piece weights 3, 1, 0, 1) a long
// head on a table of its own, rows (0, 1), (1, 0), (5, 5), (0, 0): features and weights, bias 1,
// long_after 2, and static.first_sentence when firstSentence is not nil. It returns the head's
// and the table's bytes.
func withLongTable(t *testing.T, dir string, features []string, weights []float32, firstSentence map[string]any) (lh, lt []byte) {
	t.Helper()
	writePieceWeights(t, dir, []float32{3, 1, 0, 1})
	for _, r := range [][2]float32{{0, 1}, {1, 0}, {5, 5}, {0, 0}} {
		for _, v := range r {
			lt = binary.LittleEndian.AppendUint32(lt, math.Float32bits(v))
		}
	}
	lh, err := json.Marshal(map[string]any{"features": features, "weights": weights, "bias": 1})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "static_long_head.json"), lh, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "static_long_table.bin"), lt, 0o644))
	editManifest(t, dir, func(m map[string]any) {
		s := m["static"].(map[string]any)
		s["long_head_file"], s["long_head_sha256"] = "static_long_head.json", sha256Hex(lh)
		s["long_features"], s["long_after"] = features, 2
		s["long_table_file"], s["long_table_sha256"] = "static_long_table.bin", sha256Hex(lt)
		if firstSentence != nil {
			s["first_sentence"] = firstSentence
		}
	})
	return lh, lt
}

func writePieceWeights(t *testing.T, dir string, w []float32) {
	t.Helper()
	var b []byte
	for _, v := range w {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "static_piece_weights.bin"), b, 0o644))
	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = FormatLatest // weighted_mean needs 2 or later
		s := m["static"].(map[string]any)
		s["pooling"], s["weights_file"], s["weights_sha256"] = "weighted_mean", "static_piece_weights.bin", sha256Hex(b)
	})
}

// TestStaticWeightedMean: under weighted_mean each kept piece's row counts by its weight, a
// piece of weight 0 not at all, and a text of weight-0 pieces only has no vector (the bias
// and has_context decide it). A plain mean is the same stage with every weight 1.
func TestStaticWeightedMean(t *testing.T) {
	// fp32 rows of a 4-piece vocabulary, dim 2; piece 3 is the separator.
	rows := [][2]float32{{1, 0}, {0, 2}, {-1, 1}, {0, 0}}
	var table []byte
	for _, r := range rows {
		for _, v := range r {
			table = binary.LittleEndian.AppendUint32(table, math.Float32bits(v))
		}
	}
	head, err := json.Marshal(map[string]any{"features": []string{featStatic, FeatureHasContext}, "weights": []float32{1, -1, 0.5}, "bias": 0.25})
	require.NoError(t, err)
	const sep = 3
	setup := func(t *testing.T) string {
		dir := copyDir(t, filepath.Join(repo, "models"))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "static_table.bin"), table, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "static_head.json"), head, 0o644))
		editManifest(t, dir, func(m map[string]any) {
			s := m["static"].(map[string]any)
			s["table_format"], s["vocab"], s["dim"], s["drop_ids"] = formatFP32, 4, 2, []int{sep}
			s["table_sha256"], s["head_sha256"] = sha256Hex(table), sha256Hex(head)
			for _, k := range []string{"in_band_head_file", "in_band_head_sha256", "in_band_features",
				"long_head_file", "long_head_sha256", "long_features", "long_after", "long_table_file", "long_table_sha256",
				"first_sentence"} {
				delete(s, k) // the shipped heads are for 384 dims
			}
		})
		return dir
	}
	sigmoid := func(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

	// The in-band head's first k pieces are the first k kept ones: a piece of weight 0 is
	// not among them. Its weights read the first piece's second value only.
	t.Run("in-band head", func(t *testing.T) {
		dir := setup(t)
		writePieceWeights(t, dir, []float32{3, 1, 0, 1})
		ib, err := json.Marshal(map[string]any{"features": []string{featStatic, "first1_mean_l2"},
			"weights": []float32{0, 0, 0, 1}, "bias": 0})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "static_in_band_head.json"), ib, 0o644))
		editManifest(t, dir, func(m map[string]any) {
			s := m["static"].(map[string]any)
			s["in_band_head_file"], s["in_band_head_sha256"] = "static_in_band_head.json", sha256Hex(ib)
			s["in_band_features"] = []string{featStatic, "first1_mean_l2"}
		})
		s, shas, err := loadStage(dir)
		require.NoError(t, err)
		require.Len(t, shas, 4, "table, head, weights, in-band head")
		p, err := s.ScoreInBand([]uint32{2, 1, 0, sep}, sep) // piece 2 weighs 0: the first kept is 1, row (0, 2)
		require.NoError(t, err)
		require.InDelta(t, sigmoid(1), p, 1e-6)
		p, err = s.ScoreInBand([]uint32{0, 1, sep}, sep) // first kept 0, row (1, 0)
		require.NoError(t, err)
		require.InDelta(t, 0.5, p, 1e-6)
	})

	// The long head scores a text without a context and with more than long_after kept
	// pieces (a piece of weight 0 is not counted); every other text is the static head's.
	// Inside the band the in-band head decides every text.
	t.Run("long head", func(t *testing.T) {
		dir := setup(t)
		writePieceWeights(t, dir, []float32{3, 1, 0, 1})
		lh, err := json.Marshal(map[string]any{"features": []string{featStatic, FeatureHasContext},
			"weights": []float32{-2, 0, 7}, "bias": 1})
		require.NoError(t, err)
		ib, err := json.Marshal(map[string]any{"features": []string{featStatic, "first1_mean_l2"},
			"weights": []float32{0, 0, 0, 1}, "bias": 0})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "static_long_head.json"), lh, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "static_in_band_head.json"), ib, 0o644))
		editManifest(t, dir, func(m map[string]any) {
			s := m["static"].(map[string]any)
			s["long_head_file"], s["long_head_sha256"] = "static_long_head.json", sha256Hex(lh)
			s["long_features"], s["long_after"] = []string{featStatic, FeatureHasContext}, 2
			s["in_band_head_file"], s["in_band_head_sha256"] = "static_in_band_head.json", sha256Hex(ib)
			s["in_band_features"] = []string{featStatic, "first1_mean_l2"}
		})
		s, shas, err := loadStage(dir)
		require.NoError(t, err)
		require.True(t, s.HasLongHead())
		require.Len(t, shas, 5, "table, head, weights, in-band head, long head")
		// Pieces 0 (×3), 0 (×3), 1 (×1): sum (6, 2), unit (3, 1)/√10.
		long := sigmoid(1 - 2*3/math.Sqrt(10))
		for _, ids := range [][]uint32{{0, 0, 1, sep}, {0, 2, 0, 2, 1, sep}} {
			p, err := s.Score(ids, sep)
			require.NoError(t, err)
			require.InDeltaf(t, long, p, 1e-6, "%v: 3 kept pieces, no context: the long head", ids)
			p, err = s.ScoreInBand(ids, sep)
			require.NoError(t, err)
			require.InDeltaf(t, 0.5, p, 1e-6, "%v: inside the band the in-band head decides (first kept piece 0 reads 0)", ids)
		}
		// Two kept pieces (weight-0 piece 2 not counted): the static head, and the in-band head.
		p, err := s.Score([]uint32{0, 2, 2, 1, sep}, sep)
		require.NoError(t, err)
		require.InDelta(t, sigmoid(0.25+(3-2)/math.Sqrt(13)), p, 1e-6)
		p, err = s.ScoreInBand([]uint32{0, 2, 2, 1, sep}, sep)
		require.NoError(t, err)
		require.InDelta(t, 0.5, p, 1e-6, "first kept piece 0, row (1, 0): the in-band head reads 0")
		// Three kept pieces with a context: the static head.
		p, err = s.Score([]uint32{0, 0, sep, 1, sep}, sep)
		require.NoError(t, err)
		require.InDelta(t, sigmoid(0.25+(3-1)/math.Sqrt(10)+0.5), p, 1e-6)
	})

	// With a table of its own (format 5) the long head pools its texts over that table, with
	// the same piece weights and the same gate; every other text is pooled over the static
	// table, and the in-band head reads the static table.
	t.Run("long head with its own table", func(t *testing.T) {
		dir := setup(t)
		lh, lt := withLongTable(t, dir, []string{featLongTable, FeatureHasContext}, []float32{-2, 0, 7}, nil)
		s, shas, err := loadStage(dir)
		require.NoError(t, err)
		require.Equal(t, []string{sha256Hex(lh), sha256Hex(lt)}, shas[len(shas)-2:], "the long head, then its table")
		// Pieces 0 (×3), 0 (×3), 1 (×1) on the long table: sum (1, 6), unit (1, 6)/√37.
		for _, ids := range [][]uint32{{0, 0, 1, sep}, {0, 2, 0, 2, 1, sep}} {
			p, err := s.Score(ids, sep)
			require.NoError(t, err)
			require.InDeltaf(t, sigmoid(1-2/math.Sqrt(37)), p, 1e-6, "%v: the long head on its table", ids)
		}
		// Two kept pieces: the static head on the static table, as without the long table.
		p, err := s.Score([]uint32{0, 2, 2, 1, sep}, sep)
		require.NoError(t, err)
		require.InDelta(t, sigmoid(0.25+(3-2)/math.Sqrt(13)), p, 1e-6)

		// A table of the wrong size is refused by name.
		require.NoError(t, os.WriteFile(filepath.Join(dir, "static_long_table.bin"), lt[:8], 0o644))
		editManifest(t, dir, func(m map[string]any) { m["static"].(map[string]any)["long_table_sha256"] = sha256Hex(lt[:8]) })
		_, _, err = loadStage(dir)
		require.ErrorContains(t, err, "static long table")
		require.ErrorContains(t, err, "8 bytes, want 32")
	})

	// With its first sentence (format 6) the long head reads, beside its table's vector, the
	// static table's vector of the pieces up to the first end id (position 0 is [CLS]'s) not
	// after a not_after id and not before a not_before id; a text without one is its own first
	// sentence. Every other text is scored as before.
	t.Run("long head with its first sentence", func(t *testing.T) {
		dir := setup(t)
		withLongTable(t, dir, []string{featLongTable, featFirstSentence, FeatureHasContext}, []float32{-2, 0, 1, 1, 7},
			map[string]any{"end_ids": []int{1}, "not_after_ids": []int{2}, "not_before_ids": []int{0}, "max_pieces": 64})
		s, _, err := loadStage(dir)
		require.NoError(t, err)
		// Long table: four 0s (×3) and one 1: (1, 12)/√145; the head reads -2 of it.
		whole := -2 / math.Sqrt(145)
		for _, c := range []struct {
			ids   []uint32
			first float64 // the first sentence's static vector times (1, 1)
			why   string
		}{
			{[]uint32{0, 0, 1, 2, 0, 0, sep}, (6 + 2) / math.Sqrt(40), "ends at piece 1: 0, 0 (×3) and 1, (6, 2)/√40"},
			{[]uint32{0, 0, 1, 0, 0, sep}, (12 + 2) / math.Sqrt(148), "piece 1 before a 0 ends nothing: the whole, (12, 2)/√148"},
			{[]uint32{0, 2, 1, 0, 0, 0, sep}, (12 + 2) / math.Sqrt(148), "piece 1 after a 2 ends nothing: the whole"},
		} {
			p, err := s.Score(c.ids, sep)
			require.NoError(t, err)
			require.InDeltaf(t, sigmoid(1+whole+c.first), p, 1e-6, "%v: %s", c.ids, c.why)
		}
		// The rule alone: within max_pieces pieces after position 0, and never the last piece.
		fs := newFirstSentence(&FirstSentence{EndIDs: []uint32{1}, MaxPieces: 2}, 4)
		require.Equal(t, []uint32{0, 1}, fs.of([]uint32{0, 1, 0, sep}))
		require.Equal(t, []uint32{0, 0, 0, 1, 0, sep}, fs.of([]uint32{0, 0, 0, 1, 0, sep}), "past max_pieces")
		require.Equal(t, []uint32{0, 0, 1}, fs.of([]uint32{0, 0, 1}), "the last piece ends nothing")
		require.Equal(t, []uint32{0, 9, 1}, fs.of([]uint32{0, 9, 1, 99, sep}), "an id outside the vocabulary flags nothing")
		// Two kept pieces: the static head, as without the long head.
		p, err := s.Score([]uint32{0, 2, 2, 1, sep}, sep)
		require.NoError(t, err)
		require.InDelta(t, sigmoid(0.25+(3-2)/math.Sqrt(13)), p, 1e-6)
	})

	dir := setup(t)
	writePieceWeights(t, dir, []float32{3, 1, 0, 1})
	s, shas, err := loadStage(dir)
	require.NoError(t, err)
	require.Len(t, shas, 3, "table, head, weights")
	// Pieces 0 (×3), 1 (×1), 2 (×0): mean (3, 2)/4, unit (3, 2)/√13; one separator.
	p, err := s.Score([]uint32{0, 1, 2, sep}, sep)
	require.NoError(t, err)
	require.InDelta(t, sigmoid(0.25+(3-2)/math.Sqrt(13)), p, 1e-6)
	p, err = s.Score([]uint32{2, 2, sep, 2, sep}, sep)
	require.NoError(t, err)
	require.InDelta(t, sigmoid(0.25+0.5), p, 1e-6, "weight-0 pieces only: bias and has_context")

	plain := setup(t)
	writePieceWeights(t, plain, []float32{1, 1, 1, 1})
	sw, _, err := loadStage(plain)
	require.NoError(t, err)
	editManifest(t, plain, func(m map[string]any) {
		m["static"].(map[string]any)["pooling"] = "mean"
		delete(m["static"].(map[string]any), "weights_file")
	})
	sm, _, err := loadStage(plain)
	require.NoError(t, err)
	for _, ids := range [][]uint32{{0, 1, 2, sep}, {1, 1, sep}, {2, sep, 0, sep}} {
		a, err := sw.Score(ids, sep)
		require.NoError(t, err)
		b, err := sm.Score(ids, sep)
		require.NoError(t, err)
		require.Equal(t, b, a, "weights of 1 are the plain mean: %v", ids)
	}
}

// TestManifestFormatVersions: a format-1 manifest (no format_version, plain mean) loads; a
// format this build does not know, and weighted_mean under format 1, are refused by name.
func TestManifestFormatVersions(t *testing.T) {
	dir := copyDir(t, filepath.Join(repo, "models"))
	editManifest(t, dir, func(m map[string]any) {
		delete(m, "format_version")
		s := m["static"].(map[string]any)
		for _, k := range []string{"in_band_head_file", "in_band_head_sha256", "in_band_features",
			"long_head_file", "long_head_sha256", "long_features", "long_after", "long_table_file", "long_table_sha256",
			"first_sentence"} {
			delete(s, k) // a format-3, -4, -5 or -6 field
		}
		if s["pooling"] == "weighted_mean" {
			// The shipped model weighs its pieces; as format 1 it is the same table with a plain mean.
			s["pooling"] = "mean"
			delete(s, "weights_file")
			delete(s, "weights_sha256")
		}
	})
	_, _, err := loadStage(dir)
	require.NoError(t, err, "a format-1 manifest still loads")

	editManifest(t, dir, func(m map[string]any) { m["format_version"] = 7 })
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "format_version 7")
	require.ErrorContains(t, err, "formats 1 to 6")

	editManifest(t, dir, func(m map[string]any) {
		delete(m, "format_version")
		m["static"].(map[string]any)["pooling"] = "weighted_mean"
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "needs format_version 2")

	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = 2
		s := m["static"].(map[string]any)
		s["in_band_head_file"], s["in_band_head_sha256"] = "static_in_band_head.json", "00"
		s["in_band_features"] = []string{"static_mean_l2", "first3_mean_l2", "has_context"}
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "static.in_band_head_file needs format_version 3")

	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = 3
		s := m["static"].(map[string]any)
		s["long_head_file"], s["long_head_sha256"] = "static_long_head.json", "00"
		s["long_features"], s["long_after"] = []string{"static_mean_l2", "has_context"}, 32
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "static.long_head_file needs format_version 4")

	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = 4
		s := m["static"].(map[string]any)
		s["long_features"], s["long_after"] = []string{"first3_mean_l2"}, -1
		delete(s, "long_head_sha256")
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "static.long_head_file and long_head_sha256: both or neither")
	require.ErrorContains(t, err, "static.long_features")
	require.ErrorContains(t, err, "static.long_after: must be in [0")

	// The long head's own table is format 5, and its head then reads long_table_mean_l2.
	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = 4
		s := m["static"].(map[string]any)
		s["long_head_sha256"], s["long_after"] = "00", 32
		s["long_table_file"], s["long_table_sha256"] = "static_long_table.bin", "00"
		s["long_features"] = []string{"long_table_mean_l2", "has_context"}
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "static.long_table_file needs format_version 5")
	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = 5
		s := m["static"].(map[string]any)
		s["long_features"] = []string{"static_mean_l2", "has_context"}
		delete(s, "long_table_file")
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "static.long_table_file and long_table_sha256: both or neither")
	require.ErrorContains(t, err, `static.long_features: want ["long_table_mean_l2"], then "has_context" (optional)`)

	// The first sentence is format 6, and the long head then reads first_sentence_mean_l2
	// after its vector; its ids must be in the vocabulary.
	editManifest(t, dir, func(m map[string]any) {
		s := m["static"].(map[string]any)
		s["long_table_file"] = "static_long_table.bin"
		s["first_sentence"] = map[string]any{"end_ids": []int{1012}, "not_after_ids": []int{}, "not_before_ids": []int{}, "max_pieces": 64}
		s["long_features"] = []string{"long_table_mean_l2", "first_sentence_mean_l2", "has_context"}
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "static.first_sentence needs format_version 6")
	editManifest(t, dir, func(m map[string]any) {
		m["format_version"] = 6
		s := m["static"].(map[string]any)
		s["first_sentence"] = map[string]any{"end_ids": []int{}, "not_after_ids": []int{1 << 20}, "not_before_ids": []int{}, "max_pieces": 0}
		s["long_features"] = []string{"long_table_mean_l2", "has_context"}
	})
	_, err = LoadManifest(dir)
	require.ErrorContains(t, err, "static.first_sentence.end_ids: must not be empty")
	require.ErrorContains(t, err, "static.first_sentence.not_after_ids: id 1048576 outside the vocabulary")
	require.ErrorContains(t, err, "static.first_sentence.max_pieces: must be in [1, 4096], got 0")
	require.ErrorContains(t, err, `static.long_features: want ["long_table_mean_l2" "first_sentence_mean_l2"], then "has_context" (optional)`)
}

func TestPieceWeightErrors(t *testing.T) {
	vocab := func(t *testing.T, dir string) int {
		m, err := LoadManifest(dir)
		require.NoError(t, err)
		return m.Static.Vocab
	}
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir string)
		want   []string
	}{
		{"no weights file named", func(t *testing.T, dir string) {
			writePieceWeights(t, dir, make([]float32, vocab(t, dir)))
			editManifest(t, dir, func(m map[string]any) { delete(m["static"].(map[string]any), "weights_file") })
		}, []string{"static.weights_file", "required"}},
		{"wrong size", func(t *testing.T, dir string) {
			writePieceWeights(t, dir, []float32{1, 2, 3})
		}, []string{"static piece weights", "12 bytes"}},
		{"negative weight", func(t *testing.T, dir string) {
			w := make([]float32, vocab(t, dir))
			w[7] = -1
			writePieceWeights(t, dir, w)
		}, []string{"static piece weights", "weight 7 is -1"}},
		{"sha mismatch", func(t *testing.T, dir string) {
			writePieceWeights(t, dir, make([]float32, vocab(t, dir)))
			editManifest(t, dir, func(m map[string]any) { m["static"].(map[string]any)["weights_sha256"] = "00" })
		}, []string{"static piece weights", "sha256"}},
		{"weights under plain mean", func(t *testing.T, dir string) {
			writePieceWeights(t, dir, make([]float32, vocab(t, dir)))
			editManifest(t, dir, func(m map[string]any) { m["static"].(map[string]any)["pooling"] = "mean" })
		}, []string{"static.weights_file", "only read with pooling"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, filepath.Join(repo, "models"))
			tc.mutate(t, dir)
			_, _, err := loadStage(dir)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// The in-band head's part of the manifest is checked before anything is read, and its file
// against the manifest; a model without one scores inside the band on its static head.
func TestInBandHeadErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(s map[string]any)
		want string
	}{
		{"unknown feature", func(s map[string]any) {
			s["in_band_features"] = []string{featStatic, "first0_mean_l2", FeatureHasContext}
		}, "static.in_band_features"},
		{"features out of order", func(s map[string]any) {
			s["in_band_features"] = []string{"first3_mean_l2", featStatic}
		}, "static.in_band_features"},
		{"no sha256", func(s map[string]any) { delete(s, "in_band_head_sha256") }, "both or neither"},
		{"wrong sha256", func(s map[string]any) { s["in_band_head_sha256"] = strings.Repeat("0", 64) }, "does not match the manifest's"},
		{"features not the file's", func(s map[string]any) {
			s["in_band_features"] = []string{featStatic, "first4_mean_l2", FeatureHasContext}
		}, "the manifest says"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, filepath.Join(repo, "models"))
			editManifest(t, dir, func(m map[string]any) { tc.edit(m["static"].(map[string]any)) })
			_, _, err := loadStage(dir)
			require.ErrorContains(t, err, tc.want)
		})
	}
	for _, k := range []struct {
		f  string
		k  int
		ok bool
	}{{"first3_mean_l2", 3, true}, {"first64_mean_l2", 64, true}, {"first65_mean_l2", 0, false},
		{"first03_mean_l2", 0, false}, {"first_mean_l2", 0, false}, {"first3_mean", 0, false}} {
		got, ok := firstKFeature(k.f)
		require.Equal(t, k.ok, ok, k.f)
		require.Equal(t, k.k, got, k.f)
	}

	dir := copyDir(t, filepath.Join(repo, "models"))
	editManifest(t, dir, func(m map[string]any) {
		s := m["static"].(map[string]any)
		delete(s, "in_band_head_file")
		delete(s, "in_band_head_sha256")
		delete(s, "in_band_features")
	})
	s, _, err := loadStage(dir)
	require.NoError(t, err)
	require.False(t, s.HasInBandHead())
	ids := []uint32{101, 2023, 2003, 1037, 3231, 102}
	p, err := s.Score(ids, 102)
	require.NoError(t, err)
	pIB, err := s.ScoreInBand(ids, 102)
	require.NoError(t, err)
	require.Equal(t, p, pIB, "without an in-band head, ScoreInBand is Score")
}
