package router

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

// countingModel is the real classifier, counting the calls the router makes.
type countingModel struct {
	*classifier.Classifier
	tokenize, static, classify, classifyTokens atomic.Int64
}

func (m *countingModel) Tokenize(text string) (classifier.Tokens, error) {
	m.tokenize.Add(1)
	return m.Classifier.Tokenize(text)
}

func (m *countingModel) StaticScore(t classifier.Tokens) (classifier.Result, error) {
	m.static.Add(1)
	return m.Classifier.StaticScore(t)
}

func (m *countingModel) Classify(ctx context.Context, texts []string) ([]classifier.Result, error) {
	m.classify.Add(int64(len(texts)))
	return m.Classifier.Classify(ctx, texts)
}

func (m *countingModel) ClassifyTokens(ctx context.Context, toks []classifier.Tokens) ([]classifier.Result, error) {
	m.classifyTokens.Add(int64(len(toks)))
	return m.Classifier.ClassifyTokens(ctx, toks)
}

// realClassifier loads the shipped model (models/, .deps/ from scripts/setup.sh).
func realClassifier(t *testing.T) *countingModel {
	t.Helper()
	cfg := classifier.DefaultConfig()
	cfg.ModelDir = filepath.Join("..", cfg.ModelDir)
	cfg.EncoderDir = filepath.Join("..", cfg.EncoderDir)
	cfg.ORTLibrary = filepath.Join("..", cfg.ORTLibrary)
	c, err := classifier.New(cfg)
	require.NoError(t, err)
	return &countingModel{Classifier: c}
}

// parityTexts returns one text the first stage decides and one it defers, from the
// notebook's parity file, with their expected P(slow) per stage.
func parityTexts(t *testing.T, band classifier.Band) (decided, deferred struct {
	text           string
	pStatic, pSlow float64
}) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "models", "parity.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct {
			Category, Text   string
			PSlow            float64 `json:"p_slow"`
			PStatic          float64 `json:"p_static"`
			Instruction, Ctx string
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		if r.Category == "edge" || r.Text != Input(r.Text, "") {
			continue
		}
		if band.Decides(float32(r.PStatic)) && decided.text == "" {
			decided.text, decided.pStatic, decided.pSlow = r.Text, r.PStatic, r.PSlow
		}
		if !band.Decides(float32(r.PStatic)) && deferred.text == "" {
			deferred.text, deferred.pStatic, deferred.pSlow = r.Text, r.PStatic, r.PSlow
		}
	}
	require.NotEmpty(t, decided.text)
	require.NotEmpty(t, deferred.text)
	return decided, deferred
}

// With the cascade on, a text outside the band is decided by the first stage (no encoder
// call); one inside goes to the encoder with the tokens the first stage made (tokenized
// once); both are cached with their stage.
func TestCascadeDecidesOutsideTheBandAndHandsTokensOn(t *testing.T) {
	m := realClassifier(t)
	band, ok := m.Band()
	require.True(t, ok, "the shipped model has a first stage")
	r := startRouter(t, testConfig(), m)
	decided, deferred := parityTexts(t, band)
	ctx := context.Background()

	rt, err := r.Preview(ctx, decided.text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageStatic, rt.Stage)
	require.InDelta(t, decided.pStatic, rt.PSlow, 1e-5)
	require.Positive(t, rt.Static)
	require.Zero(t, rt.Inference)
	require.Zero(t, m.classify.Load()-1, "only the startup probe ran the encoder")
	require.Zero(t, m.classifyTokens.Load())

	rt, err = r.Preview(ctx, deferred.text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageEncoder, rt.Stage)
	require.InDelta(t, deferred.pSlow, rt.PSlow, 1e-5)
	require.EqualValues(t, 2, m.tokenize.Load(), "each text tokenized once")
	require.EqualValues(t, 1, m.classifyTokens.Load(), "the encoder got the first stage's tokens")
	require.EqualValues(t, 1, m.classify.Load(), "and never the text again")

	r.WaitCache()
	for _, tc := range []struct {
		text  string
		stage classifier.Stage
	}{{decided.text, classifier.StageStatic}, {deferred.text, classifier.StageEncoder}} {
		rt, err := r.Preview(ctx, tc.text)
		require.NoError(t, err)
		require.True(t, rt.Hit)
		require.Equal(t, tc.stage, rt.Stage, "a hit reports the stage that made the result")
	}
	require.EqualValues(t, 2, m.tokenize.Load(), "hits do not tokenize")
	var n int
	r.tokens.Range(func(any, any) bool { n++; return true })
	require.Zero(t, n, "no tokens are left behind")
}

func TestCascadeOffUsesOnlyTheEncoder(t *testing.T) {
	m := realClassifier(t)
	band, _ := m.Band()
	cfg := testConfig()
	cfg.Cascade.Enabled = false
	r := startRouter(t, cfg, m)
	decided, _ := parityTexts(t, band)
	rt, err := r.Preview(context.Background(), decided.text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageEncoder, rt.Stage)
	require.InDelta(t, decided.pSlow, rt.PSlow, 1e-5)
	require.Zero(t, m.tokenize.Load())
	require.Zero(t, rt.Static)
}

// A band override moves what the first stage decides; the caches are keyed by it, so
// results made under another band or with the cascade off are never served.
func TestCascadeBandOverrideAndCacheKeys(t *testing.T) {
	m := realClassifier(t)
	band, _ := m.Band()
	decided, _ := parityTexts(t, band)
	cfg := testConfig()
	cfg.Cascade.BandLow, cfg.Cascade.BandHigh = 1e-9, 1-1e-9 // the first stage decides (almost) nothing
	r := startRouter(t, cfg, m)
	rt, err := r.Preview(context.Background(), decided.text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageEncoder, rt.Stage)

	v := m.Version()
	keys := map[string]bool{
		cacheVersion(v, nil, classifier.Band{}):                       true,
		cacheVersion(v, m, band):                                      true,
		cacheVersion(v, m, classifier.Band{Lo: 1e-9, Hi: 1 - 1e-9}):   true,
		cacheVersion(v, m, classifier.Band{Lo: band.Lo, Hi: band.Hi}): true,
	}
	require.Len(t, keys, 3, "encoder-only and each band key apart; the same band keys alike")

	require.ErrorContains(t, CascadeConfig{Enabled: true, BandLow: 0.9, BandHigh: 0.1}.ValidateAt("cascade"), "cascade.band_low")
	require.NoError(t, CascadeConfig{Enabled: true}.ValidateAt("cascade"))
}

func TestSharedTierValueRoundTrips(t *testing.T) {
	c := cached{pSlow: 0.8125, tokens: 42, stage: classifier.StageStatic}
	got, ok := decodeCached(c.encode())
	require.True(t, ok)
	require.Equal(t, c, got)
	for _, bad := range []string{"", "12345678", string(make([]byte, 10))} {
		_, ok := decodeCached(bad)
		require.False(t, ok, "%q", bad)
	}
	nan := cached{pSlow: 2}.encode()
	_, ok = decodeCached(nan)
	require.False(t, ok, "P(slow) outside [0, 1]")
}
