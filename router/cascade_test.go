package router

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/decision"
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
	// encode, when set, sees the texts of each ClassifyTokens call before they are scored.
	encode func(texts []string)
}

const stagedTokenizer = "bytes/0"

func newStagedModel() *stagedModel {
	return &stagedModel{fakeModel: fakeModel{version: "v1", cutoff: 0.5}, band: classifier.Band{Lo: 0.1, Hi: 0.9}}
}

// holdEncoder makes m's encoder wait on every text that contains "hold" until the returned
// function is called (once or more).
func holdEncoder(m *stagedModel) (release func()) {
	ch := make(chan struct{})
	var once sync.Once
	m.encode = func(texts []string) {
		for _, tx := range texts {
			if strings.Contains(tx, "hold") {
				<-ch
			}
		}
	}
	return func() { once.Do(func() { close(ch) }) }
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
	return m.wordScore(t, "s=")
}

// wordScore is a first-stage Result for t: P(slow) from the text's word with prefix
// (e.g. "s=0.95"), 0.5 without one.
func (m *stagedModel) wordScore(t classifier.Tokens, prefix string) (classifier.Result, error) {
	text, ok := m.text(t)
	if !ok {
		return classifier.Result{}, classifier.ErrForeignTokens
	}
	r := classifier.Result{PSlow: 0.5, Tokens: t.Len(), Stage: classifier.StageStatic}
	for w := range strings.FieldsSeq(text) {
		if v, ok := strings.CutPrefix(w, prefix); ok {
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
	if m.encode != nil {
		m.encode(texts)
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

func TestBandNarrowsWithTheQueue(t *testing.T) {
	c := CascadeConfig{Enabled: true, NarrowFrom: 8, NarrowTo: 24}
	band := classifier.Band{Lo: 0.125, Hi: 0.625} // centre 0.375
	for _, tc := range []struct {
		queued int
		want   classifier.Band
	}{
		{0, band}, {8, band},
		{16, classifier.Band{Lo: 0.25, Hi: 0.5}},
		{24, classifier.Band{Lo: 0.375, Hi: 0.375}},
		{1000, classifier.Band{Lo: 0.375, Hi: 0.375}},
	} {
		t.Run(strconv.Itoa(tc.queued), func(t *testing.T) {
			got := c.bandAt(band, tc.queued)
			require.InDelta(t, tc.want.Lo, got.Lo, 1e-12)
			require.InDelta(t, tc.want.Hi, got.Hi, 1e-12)
		})
	}
	require.False(t, c.bandAt(band, 24).Decides(0.375), "a collapsed band leaves only its centre to the encoder")
	require.True(t, c.bandAt(band, 24).Decides(0.38))
	off := CascadeConfig{Enabled: true}
	require.Equal(t, band, off.bandAt(band, 1000), "narrow_to 0: the band never narrows")

	for _, bad := range []CascadeConfig{{NarrowFrom: 8, NarrowTo: 8}, {NarrowFrom: -1, NarrowTo: 8}, {NarrowTo: -3}} {
		require.ErrorContains(t, bad.ValidateAt("cascade"), "cascade.narrow_")
	}
	require.NoError(t, DefaultCascadeConfig().ValidateAt("cascade"))
}

// Under a long encoder queue the first stage decides a text inside the model's band, and
// that result is not cached: once the queue is gone the same text goes to the encoder.
func TestCascadeUnderLoadDecidesMoreAndCachesNothingExtra(t *testing.T) {
	m := newStagedModel()
	release := holdEncoder(m)
	cfg := testConfig()
	cfg.Cascade.NarrowFrom, cfg.Cascade.NarrowTo = 0, 4
	cfg.Batcher.MaxBatch = 1
	r := startRouter(t, cfg, m)
	ctx := context.Background()

	// One text holds the encoder; four more queue behind it.
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() { _, _ = r.Preview(ctx, fmt.Sprintf("hold %d s=0.5 p=0.2", i)) })
	}
	require.Eventually(t, func() bool { return r.batch.QueueLen() >= 4 }, 10*time.Second, time.Millisecond)

	const text = "inside the band s=0.3 p=0.8"
	rt, err := r.Preview(ctx, text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageStatic, rt.Stage, "band collapsed to its centre: the first stage decides")
	require.InDelta(t, 0.3, rt.PSlow, 1e-6)

	release()
	wg.Wait()
	r.WaitCache()
	rt, err = r.Preview(ctx, text)
	require.NoError(t, err)
	require.False(t, rt.Hit, "a decision made only under load is not cached")
	require.Equal(t, classifier.StageEncoder, rt.Stage)
	require.InDelta(t, 0.8, rt.PSlow, 1e-6)
}

// A text the first stage scored inside its band, whose encoder answer does not come within
// routing.classify_budget, is decided on the first stage's score: not placed blind by
// routing.fallback, and not cached.
func TestInBandScoreDecidesWhenTheEncoderFails(t *testing.T) {
	m := newStagedModel()
	release := holdEncoder(m)
	cfg := testConfig()
	cfg.Cascade.NarrowTo = 0
	cfg.Routing.ClassifyBudget = 30 * time.Millisecond
	r := startRouter(t, cfg, m)
	defer release()

	const text = "hold this s=0.7 p=0.2"
	rt, err := r.Route(context.Background(), text)
	require.NoError(t, err)
	defer rt.Release()
	require.Equal(t, decision.ReasonClassifierTimeout, rt.InBandAfter)
	require.Equal(t, classifier.StageStatic, rt.Stage)
	require.InDelta(t, 0.7, rt.PSlow, 1e-6, "the first stage's score, not the encoder's 0.2")
	require.True(t, rt.Classified())
	require.NotEqual(t, decision.ReasonClassifierTimeout, rt.Reason, "decided like any scored route")
	require.Equal(t, 1.0, counterValue(t, r.m.inBandRescues.WithLabelValues(string(decision.ReasonClassifierTimeout))))
	require.Equal(t, 1.0, counterValue(t, r.m.fallbacks.WithLabelValues(string(decision.ReasonClassifierTimeout))))
	_, ok := r.cache.get(r.models.peek().key, text)
	require.False(t, ok, "an in-band score is not cached")
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// inBandModel is stagedModel with an in-band head, scoring a text by its "i=0.2" word
// (0.5 without one) and counting its calls.
type inBandModel struct {
	*stagedModel
	inBand atomic.Int64
}

func (m *inBandModel) InBandScore(t classifier.Tokens) (classifier.Result, error) {
	m.inBand.Add(1)
	return m.wordScore(t, "i=")
}

var _ InBandScorer = (*inBandModel)(nil)

// With an in-band head, a text inside the model's band that the first stage decides after
// all (the band narrowed under load, or the encoder too slow) is decided on that head's
// score, never cached; a text outside the band is the static head's as before, and a text
// inside it at an idle gateway is the encoder's.
func TestInBandHeadDecidesWhatTheBandLeavesUnderLoad(t *testing.T) {
	m := &inBandModel{stagedModel: newStagedModel()}
	unblock := holdEncoder(m.stagedModel)
	cfg := testConfig()
	cfg.Cascade.NarrowFrom, cfg.Cascade.NarrowTo = 0, 4
	cfg.Batcher.MaxBatch = 1
	cfg.Routing.ClassifyBudget = 0
	r := startRouter(t, cfg, m)
	t.Cleanup(unblock) // runs before the router's Close, so a failed check does not hang it
	ctx := context.Background()

	rt, err := r.Preview(ctx, "outside s=0.95 i=0.1 p=0.2")
	require.NoError(t, err)
	require.Equal(t, classifier.StageStatic, rt.Stage)
	require.InDelta(t, 0.95, rt.PSlow, 1e-6, "outside the band: the static head decides")
	require.Zero(t, m.inBand.Load(), "the in-band head is not asked about a text outside the band")
	rt, err = r.Preview(ctx, "idle s=0.5 i=0.1 p=0.8")
	require.NoError(t, err)
	require.Equal(t, classifier.StageEncoder, rt.Stage)
	require.InDelta(t, 0.8, rt.PSlow, 1e-6, "inside the band at an idle gateway: the encoder decides")

	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() { _, _ = r.Preview(ctx, fmt.Sprintf("hold %d s=0.5 p=0.2", i)) })
	}
	require.Eventually(t, func() bool { return r.batch.QueueLen() >= 4 }, 10*time.Second, time.Millisecond)
	const text = "inside the band s=0.3 i=0.8 p=0.1"
	rt, err = r.Preview(ctx, text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageStatic, rt.Stage, "band collapsed: the first stage decides")
	require.InDelta(t, 0.8, rt.PSlow, 1e-6, "on the in-band head's score, not the static head's 0.3")
	unblock()
	wg.Wait()
	r.WaitCache()
	_, ok := r.cache.get(r.models.peek().key, text)
	require.False(t, ok, "a decision made only under load is not cached")

	// The encoder too slow for the budget: the in-band head's score decides.
	cfg.Cascade.NarrowTo = 0
	cfg.Routing.ClassifyBudget = 30 * time.Millisecond
	hold := make(chan struct{})
	m2 := &inBandModel{stagedModel: newStagedModel()}
	m2.encode = func(texts []string) {
		for _, tx := range texts {
			if strings.Contains(tx, "hold") {
				<-hold
			}
		}
	}
	r2 := startRouter(t, cfg, m2)
	t.Cleanup(func() { close(hold) })
	route, err := r2.Route(ctx, "hold this s=0.7 i=0.2 p=0.9")
	require.NoError(t, err)
	defer route.Release()
	require.Equal(t, decision.ReasonClassifierTimeout, route.InBandAfter)
	require.InDelta(t, 0.2, route.PSlow, 1e-6, "the in-band head's score, not the static head's 0.7 or the encoder's 0.9")
}
