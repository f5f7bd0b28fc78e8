package router

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

// stagedModel is fakeModel with a first stage, counting the calls the router makes. Its
// tokenizer turns each byte of a text into one id, so its stages read the text back from
// the tokens: the first stage scores a text by its "s=0.95" word (0.5 without one), the
// encoder by its "p=0.87" word, as fakeModel does. The real model behind the cascade is
// exercised in cmd/triage (TestCascadeWithTheRealModel).
type stagedModel struct {
	fakeModel
	band                             classifier.Band
	tokenize, static, classifyTokens atomic.Int64
}

const stagedTokenizer = "bytes/0"

func newStagedModel() *stagedModel {
	return &stagedModel{fakeModel: fakeModel{version: "v1", cutoff: 0.5}, band: classifier.Band{Lo: 0.1, Hi: 0.9}}
}

func (m *stagedModel) Tokenize(text string) (classifier.Tokens, error) {
	m.tokenize.Add(1)
	if strings.TrimSpace(text) == "" {
		return classifier.Tokens{}, classifier.ErrEmptyText
	}
	ids := make([]uint32, len(text))
	for i := range len(text) {
		ids[i] = uint32(text[i])
	}
	return classifier.NewTokens(ids, stagedTokenizer), nil
}

// text reads a text back from its tokens.
func (m *stagedModel) text(t classifier.Tokens) (string, bool) {
	ids, ok := t.IDsFor(stagedTokenizer)
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b), ok
}

func (m *stagedModel) StaticScore(t classifier.Tokens) (classifier.Result, error) {
	m.static.Add(1)
	text, ok := m.text(t)
	if !ok {
		return classifier.Result{}, classifier.ErrForeignTokens
	}
	r := classifier.Result{PSlow: 0.5, Tokens: t.Len(), Stage: classifier.StageStatic}
	for w := range strings.FieldsSeq(text) {
		if v, ok := strings.CutPrefix(w, "s="); ok {
			f, err := strconv.ParseFloat(v, 32)
			if err != nil {
				return classifier.Result{}, err
			}
			r.PSlow = float32(f)
		}
	}
	if float64(r.PSlow) > m.cutoff {
		r.Label = classifier.SlowLabel
	}
	return r, nil
}

func (m *stagedModel) Band() (classifier.Band, bool) { return m.band, true }

func (m *stagedModel) ClassifyTokens(ctx context.Context, toks []classifier.Tokens) ([]classifier.Result, error) {
	m.classifyTokens.Add(int64(len(toks)))
	texts := make([]string, len(toks))
	for i, t := range toks {
		var ok bool
		if texts[i], ok = m.text(t); !ok {
			return nil, &classifier.TextError{Index: i, Err: classifier.ErrForeignTokens}
		}
	}
	return scoreTexts(texts, m.cutoff), nil
}

var _ Staged = (*stagedModel)(nil)

// With the cascade on, a text outside the band is decided by the first stage (no encoder
// call); one inside goes to the encoder with the tokens the first stage made (tokenized
// once); both are cached with their stage.
func TestCascadeDecidesOutsideTheBandAndHandsTokensOn(t *testing.T) {
	m := newStagedModel()
	r := startRouter(t, testConfig(), m)
	const decided, deferred = "write a poem s=0.95 p=0.8", "summarize this s=0.5 p=0.3"
	ctx := context.Background()

	rt, err := r.Preview(ctx, decided)
	require.NoError(t, err)
	require.Equal(t, classifier.StageStatic, rt.Stage)
	require.InDelta(t, 0.95, rt.PSlow, 1e-6)
	require.Positive(t, rt.Static)
	require.Zero(t, rt.Inference)
	require.EqualValues(t, 1, m.calls.Load(), "only the startup probe ran the encoder")
	require.Zero(t, m.classifyTokens.Load())

	rt, err = r.Preview(ctx, deferred)
	require.NoError(t, err)
	require.Equal(t, classifier.StageEncoder, rt.Stage)
	require.InDelta(t, 0.3, rt.PSlow, 1e-6)
	require.EqualValues(t, 2, m.tokenize.Load(), "each text tokenized once")
	require.EqualValues(t, 1, m.classifyTokens.Load(), "the encoder got the first stage's tokens")
	require.EqualValues(t, 1, m.calls.Load(), "and never the text again")

	r.WaitCache()
	for _, tc := range []struct {
		text  string
		stage classifier.Stage
	}{{decided, classifier.StageStatic}, {deferred, classifier.StageEncoder}} {
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
	m := newStagedModel()
	cfg := testConfig()
	cfg.Cascade.Enabled = false
	r := startRouter(t, cfg, m)
	rt, err := r.Preview(context.Background(), "write a poem s=0.95 p=0.8")
	require.NoError(t, err)
	require.Equal(t, classifier.StageEncoder, rt.Stage)
	require.InDelta(t, 0.8, rt.PSlow, 1e-6)
	require.Zero(t, m.tokenize.Load())
	require.Zero(t, rt.Static)
}

// A band override moves what the first stage decides; the caches are keyed by it, so
// results made under another band or with the cascade off are never served.
func TestCascadeBandOverrideAndCacheKeys(t *testing.T) {
	m := newStagedModel()
	band := m.band
	cfg := testConfig()
	cfg.Cascade.BandLow, cfg.Cascade.BandHigh = 1e-9, 1-1e-9 // the first stage decides (almost) nothing
	r := startRouter(t, cfg, m)
	rt, err := r.Preview(context.Background(), "write a poem s=0.95 p=0.8")
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
