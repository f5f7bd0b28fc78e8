package onnx

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

// TestStaticParity runs every text of the parity file through Tokenize,
// StaticScore and InBandScore: P(slow) must match the notebook's static stage
// (its long head included) and its in-band head to 1e-5. The
// file holds prompts with reference tags and URLs ("noise") and texts whose
// pieces all weigh 0, so the piece weights are checked as well as the mean.
func TestStaticParity(t *testing.T) {
	c := newTestClassifier(t, "")
	rows := loadParity(t, "")
	cats := map[string]int{}
	for _, r := range rows {
		cats[r.Category]++
	}
	require.Positive(t, cats["noise"], "parity file lacks noisy prompts (re-run the notebook)")
	// A model with a long head: the file holds texts on both sides of its gate, so a Go gate
	// that picked the other head for one of them would give the other head's P(slow).
	if m := c.Manifest(); m.Static != nil && m.Static.LongHeadFile != "" {
		long := 0
		for i, r := range rows {
			require.NotNilf(t, r.StaticLong, "row %d: parity file has no static_long (re-run the notebook)", i)
			if *r.StaticLong {
				long++
			}
		}
		require.GreaterOrEqual(t, long, 20, "parity texts the long head scores")
		require.GreaterOrEqual(t, len(rows)-long, 300, "parity texts the static head scores")
	}
	var worst, worstIB float64
	for i, row := range rows {
		require.NotNilf(t, row.PStatic, "row %d: parity file has no p_static (re-run the notebook)", i)
		tok, err := c.Tokenize(row.Text)
		require.NoError(t, err)
		res, err := c.StaticScore(tok)
		require.NoError(t, err)
		d := math.Abs(float64(res.PSlow) - *row.PStatic)
		worst = max(worst, d)
		require.LessOrEqualf(t, d, 1e-5, "row %d (%s, %d tokens): go %.7f python %.7f", i, row.Category, row.Tokens, res.PSlow, *row.PStatic)
		require.Equal(t, row.Tokens, res.Tokens)
		require.Equal(t, classifier.StageStatic, res.Stage)
		require.Equal(t, res.PSlow > 0.5, res.Label == classifier.SlowLabel)

		require.NotNilf(t, row.PInBand, "row %d: parity file has no p_static_in_band (re-run the notebook)", i)
		ib, err := c.InBandScore(tok)
		require.NoError(t, err)
		d = math.Abs(float64(ib.PSlow) - *row.PInBand)
		worstIB = max(worstIB, d)
		require.LessOrEqualf(t, d, 1e-5, "row %d (%s, %d tokens): in-band head go %.7f python %.7f", i, row.Category, row.Tokens, ib.PSlow, *row.PInBand)
		require.Equal(t, ib.PSlow > 0.5, ib.Label == classifier.SlowLabel)
	}
	t.Logf("%d texts, max |P_go - P_python| static = %.2e, in-band head = %.2e", len(rows), worst, worstIB)
}

// TestTokensFeedBothStages: ClassifyTokens gives exactly what Classify gives,
// and the static and encoder stages see the same token count.
func TestTokensFeedBothStages(t *testing.T) {
	c := newTestClassifier(t, "")
	ctx := context.Background()
	rows := loadParity(t, "")
	texts := make([]string, 0, 48)
	for i := 0; i < len(rows); i += len(rows) / 48 {
		texts = append(texts, rows[i].Text)
	}
	want, err := c.Classify(ctx, texts)
	require.NoError(t, err)
	toks := make([]classifier.Tokens, len(texts))
	for i, tx := range texts {
		toks[i], err = c.Tokenize(tx)
		require.NoError(t, err)
	}
	got, err := c.ClassifyTokens(ctx, toks)
	require.NoError(t, err)
	require.Equal(t, want, got, "ClassifyTokens must equal Classify bit for bit")
	for i, tk := range toks {
		s, err := c.StaticScore(tk)
		require.NoError(t, err)
		require.Equal(t, classifier.StageEncoder, got[i].Stage)
		require.Equal(t, got[i].Tokens, s.Tokens)
		require.Equal(t, tk.Len(), s.Tokens)
	}
}

func TestStaticStageErrors(t *testing.T) {
	c := newTestClassifier(t, "")
	_, err := c.Tokenize("  ")
	require.ErrorIs(t, err, classifier.ErrEmptyText)
	_, err = c.Tokenize("bad \xff")
	require.ErrorIs(t, err, classifier.ErrInvalidUTF8)
	_, err = c.StaticScore(classifier.Tokens{})
	require.ErrorIs(t, err, classifier.ErrForeignTokens)
	_, err = c.ClassifyTokens(context.Background(), []classifier.Tokens{{}})
	require.ErrorIs(t, err, classifier.ErrForeignTokens)

	t.Run("tokens of another truncation are refused", func(t *testing.T) {
		cfg := testConfig(t, "")
		cfg.ModelDir = copyDir(t, cfg.ModelDir)
		editManifest(t, cfg.ModelDir, func(m map[string]any) { m["encoder"].(map[string]any)["max_tokens"] = 128 })
		other, err := New(cfg)
		require.NoError(t, err)
		defer other.Close()
		tk, err := other.Tokenize(strings.Repeat("word ", 300))
		require.NoError(t, err)
		require.Equal(t, 128, tk.Len())
		_, err = c.StaticScore(tk)
		require.ErrorIs(t, err, classifier.ErrForeignTokens)
		_, err = c.ClassifyTokens(context.Background(), []classifier.Tokens{tk})
		var te *classifier.TextError
		require.ErrorAs(t, err, &te)
		require.Equal(t, 0, te.Index)
	})
	t.Run("a model without a static stage says so", func(t *testing.T) {
		q := newTestClassifier(t, "int8")
		_, ok := q.Band()
		require.False(t, ok)
		tk, err := q.Tokenize("Write a poem")
		require.NoError(t, err)
		_, err = q.StaticScore(tk)
		require.ErrorIs(t, err, classifier.ErrNoStatic)
		// Same tokenizer and truncation: the int8 model's tokens feed the fp32 static stage.
		r, err := c.StaticScore(tk)
		require.NoError(t, err)
		require.Equal(t, classifier.StageStatic, r.Stage)
	})
	t.Run("closed", func(t *testing.T) {
		cc, err := New(testConfig(t, ""))
		require.NoError(t, err)
		tk, err := cc.Tokenize("hello")
		require.NoError(t, err)
		require.NoError(t, cc.Close())
		_, err = cc.Tokenize("hello")
		require.ErrorIs(t, err, classifier.ErrClosed)
		_, err = cc.StaticScore(tk)
		require.ErrorIs(t, err, classifier.ErrClosed)
		_, err = cc.ClassifyTokens(context.Background(), []classifier.Tokens{tk})
		require.ErrorIs(t, err, classifier.ErrClosed)
	})
}

// TestBandFromManifest: the classifier serves the band of its manifest, which the
// notebook chose.
func TestBandFromManifest(t *testing.T) {
	c := newTestClassifier(t, "")
	b, ok := c.Band()
	require.True(t, ok)
	m := c.Manifest().Static
	require.Equal(t, classifier.Band{Lo: m.Band[0], Hi: m.Band[1]}, b)
}

// TestVersionIsContentDerived: two model dirs that differ only in the head's
// bytes, under the same manifest version string, get different versions;
// identical files get equal versions; the band is part of the version.
func TestVersionIsContentDerived(t *testing.T) {
	base := testConfig(t, "")
	a := newTestClassifier(t, "")
	require.True(t, strings.HasPrefix(a.Version(), a.Manifest().Version+"+"), a.Version())

	same := base
	same.ModelDir = copyDir(t, base.ModelDir)
	b, err := New(same)
	require.NoError(t, err)
	defer b.Close()
	require.Equal(t, a.Version(), b.Version(), "identical files, identical version")

	// Another head: same graph and weights, one byte of its producer name
	// changed, sha256 updated in the manifest, version string untouched.
	other := base
	other.ModelDir = copyDir(t, base.ModelDir)
	hp := filepath.Join(other.ModelDir, "head.onnx")
	head, err := os.ReadFile(hp)
	require.NoError(t, err)
	i := strings.Index(string(head), "triage-train")
	require.Positive(t, i)
	head[i] = 'T'
	require.NoError(t, os.WriteFile(hp, head, 0o644))
	editManifest(t, other.ModelDir, func(m map[string]any) { m["head"].(map[string]any)["sha256"] = sha256Hex(head) })
	d, err := New(other)
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, a.Manifest().Version, d.Manifest().Version)
	require.NotEqual(t, a.Version(), d.Version(), "a different head must change the version")

	band := base
	band.ModelDir = copyDir(t, base.ModelDir)
	editManifest(t, band.ModelDir, func(m map[string]any) { m["static"].(map[string]any)["band"] = []float64{0.2, 0.8} })
	e, err := New(band)
	require.NoError(t, err)
	defer e.Close()
	require.NotEqual(t, a.Version(), e.Version(), "another band must change the version")
}

func editManifest(t *testing.T, dir string, f func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "manifest.json")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	f(m)
	b, err = json.MarshalIndent(m, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

// TestStagesConcurrently: Tokenize, StaticScore and ClassifyTokens from
// several goroutines give the single-threaded results (run with -race).
func TestStagesConcurrently(t *testing.T) {
	c := newTestClassifier(t, "")
	rows := loadParity(t, "")[:24]
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(rows); i += 4 {
				tk, err := c.Tokenize(rows[i].Text)
				if err != nil {
					errs <- err
					return
				}
				s, err := c.StaticScore(tk)
				if err != nil {
					errs <- err
					return
				}
				e, err := c.ClassifyTokens(context.Background(), []classifier.Tokens{tk})
				if err != nil {
					errs <- err
					return
				}
				if math.Abs(float64(s.PSlow)-*rows[i].PStatic) > 1e-5 || math.Abs(float64(e[0].PSlow)-rows[i].PSlow) > 1e-4 {
					errs <- fmt.Errorf("row %d: concurrent result differs from parity", i)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
