package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/classifier/onnx"
	"github.com/triage-gw/triage/config"
	"github.com/triage-gw/triage/router"
)

// countingModel is the real classifier, counting the calls the router makes.
type countingModel struct {
	*onnx.Classifier
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

var _ router.Staged = (*countingModel)(nil)

// parityTexts returns one text the first stage decides and one it defers, from the
// notebook's parity file, with their expected P(slow) per stage.
func parityTexts(t *testing.T, band classifier.Band) (decided, deferred struct {
	text           string
	pStatic, pSlow float64
}) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "models", "parity.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct {
			Category, Text string
			PSlow          float64 `json:"p_slow"`
			PStatic        float64 `json:"p_static"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		if r.Category == "edge" || r.Text != router.Input(r.Text, "") {
			continue
		}
		if band.Decides(float32(r.PStatic)) && decided.text == "" {
			decided.text, decided.pStatic, decided.pSlow = r.Text, r.PStatic, r.PSlow
		}
		if !band.Decides(float32(r.PStatic)) && deferred.text == "" {
			deferred.text, deferred.pStatic, deferred.pSlow = r.Text, r.PStatic, r.PSlow
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, decided.text)
	require.NotEmpty(t, deferred.text)
	return decided, deferred
}

// TestCascadeWithTheRealModel runs the router's cascade on the real classifier: a text
// outside the shipped band is decided by the first stage with the notebook's static
// P(slow) and no encoder call; one inside goes to the encoder with the tokens the first
// stage made (tokenized once, never classified from its text again) and gets the notebook's
// encoder P(slow); hits keep their stage. router's own cascade tests cover the same rules
// on a fake model without the runtime.
func TestCascadeWithTheRealModel(t *testing.T) {
	c, err := onnx.New(testClassifierConfig(classifier.DefaultConfig()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() }) // the router closes it; this covers a failure before
	m := &countingModel{Classifier: c}
	band, ok := m.Band()
	require.True(t, ok, "the shipped model has a first stage")
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	loaded := false
	_, rt := startGatewayWith(t, cfg, func() (router.Model, error) {
		require.False(t, loaded, "loaded once")
		loaded = true
		return m, nil
	})
	decided, deferred := parityTexts(t, band)
	ctx := context.Background()

	r, err := rt.Preview(ctx, decided.text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageStatic, r.Stage)
	require.InDelta(t, decided.pStatic, r.PSlow, 1e-5)
	require.Positive(t, r.Static)
	require.Zero(t, r.Inference)
	require.EqualValues(t, 1, m.classify.Load(), "only the startup probe ran the encoder")
	require.Zero(t, m.classifyTokens.Load())

	r, err = rt.Preview(ctx, deferred.text)
	require.NoError(t, err)
	require.Equal(t, classifier.StageEncoder, r.Stage)
	require.InDelta(t, deferred.pSlow, r.PSlow, 1e-5)
	require.EqualValues(t, 2, m.tokenize.Load(), "each text tokenized once")
	require.EqualValues(t, 1, m.classifyTokens.Load(), "the encoder got the first stage's tokens")
	require.EqualValues(t, 1, m.classify.Load(), "and never the text again")

	rt.WaitCache()
	for _, tc := range []struct {
		text  string
		stage classifier.Stage
	}{{decided.text, classifier.StageStatic}, {deferred.text, classifier.StageEncoder}} {
		r, err := rt.Preview(ctx, tc.text)
		require.NoError(t, err)
		require.True(t, r.Hit)
		require.Equal(t, tc.stage, r.Stage, "a hit reports the stage that made the result")
	}
	require.EqualValues(t, 2, m.tokenize.Load(), "hits do not tokenize")
}

// TestLongHeadThroughTheGateway: the parity texts the notebook's long head scores (long,
// without a context; among them texts whose first sentence ends after "Dr.", "3.5" or
// "https://", and Dolly rows run together) get its P(slow) through the gateway, and those outside the band are
// decided by the first stage without the encoder: the gate and the head are the notebook's
// end to end.
func TestLongHeadThroughTheGateway(t *testing.T) {
	c, err := onnx.New(testClassifierConfig(classifier.DefaultConfig()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	m := &countingModel{Classifier: c}
	band, ok := m.Band()
	require.True(t, ok)
	require.NotEmpty(t, c.Manifest().Static.LongHeadFile, "the shipped model has a long head")
	require.NotEmpty(t, c.Manifest().Static.LongTableFile, "and a table of its own")
	require.NotNil(t, c.Manifest().Static.FirstSentence, "and reads a text's first sentence beside it")
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	_, rt := startGatewayWith(t, cfg, func() (router.Model, error) { return m, nil })

	f, err := os.Open(filepath.Join("..", "..", "models", "parity.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var long, decided int
	for sc.Scan() {
		var r struct {
			Text       string
			PStatic    float64 `json:"p_static"`
			StaticLong bool    `json:"static_long"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		if !r.StaticLong || r.Text != router.Input(r.Text, "") {
			continue
		}
		long++
		res, err := rt.Preview(context.Background(), r.Text)
		require.NoError(t, err)
		if band.Decides(float32(r.PStatic)) {
			decided++
			require.Equal(t, classifier.StageStatic, res.Stage)
			require.InDeltaf(t, r.PStatic, res.PSlow, 1e-5, "%.60q", r.Text)
		} else {
			require.Equal(t, classifier.StageEncoder, res.Stage)
		}
	}
	require.NoError(t, sc.Err())
	require.GreaterOrEqual(t, long, 20)
	require.Positive(t, decided, "some long texts are decided by the first stage")
	t.Logf("%d parity texts on the long head, %d decided by it", long, decided)
}

// TestWordCacheMetricsAndReload: the tokenizer's word cache is counted in /metrics (texts
// read through it, words it split itself) and a reload that keeps the tokenizer keeps its
// words and counts.
func TestWordCacheMetricsAndReload(t *testing.T) {
	cfg := config.DefaultConfig()
	quickSims(&cfg)
	url, rt := startGateway(t, cfg)
	value := func(m, series string) float64 {
		t.Helper()
		for _, line := range strings.Split(m, "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				return f
			}
		}
		t.Fatalf("no series %s in /metrics", series)
		return 0
	}
	const (
		texts  = `triage_tokenizer_texts_total{path="word_cache"}`
		whole  = `triage_tokenizer_texts_total{path="tokenizer"}`
		split  = `triage_tokenizer_new_words_total{by="word_cache"}`
		learnt = `triage_tokenizer_new_words_total{by="tokenizer"}`
		words  = `triage_tokenizer_cached_words`
	)
	before := metricsText(t, url)
	ctx := context.Background()
	// Made-up words: no other test of this process has put them in the (shared) word cache.
	_, err := rt.Preview(ctx, "Summarize the zorblatt quixotrel for the fnargle blorptastic wugwump.")
	require.NoError(t, err)
	_, err = rt.Preview(ctx, "Is zürbelq naïvorp cafébrix? Answer.") // words of non-ASCII: learnt from the tokenizer
	require.NoError(t, err)
	_, err = rt.Preview(ctx, "Classify "+strings.Repeat("x", 70)) // a word over 64 bytes: the tokenizer's
	require.NoError(t, err)
	after := metricsText(t, url)
	require.Equal(t, value(before, texts)+2, value(after, texts))
	require.Equal(t, value(before, whole)+1, value(after, whole))
	require.GreaterOrEqual(t, value(after, split)-value(before, split), 5.0, "zorblatt, quixotrel, ...: split by the cache")
	require.GreaterOrEqual(t, value(after, learnt)-value(before, learnt), 3.0, "zürbelq, naïvorp, cafébrix?")
	require.Greater(t, value(after, words), value(before, words))

	_, err = rt.Reload(ctx) // the same files: a new classifier all the same
	require.NoError(t, err)
	reloaded := metricsText(t, url)
	require.GreaterOrEqual(t, value(reloaded, words), value(after, words), "the reload kept the words")
	require.GreaterOrEqual(t, value(reloaded, texts), value(after, texts), "and the counts")
	_, err = rt.Preview(ctx, "Summarize the zorblatt quixotrel for the fnargle blorptastic wugwump. Qwertzuio")
	require.NoError(t, err)
	last := metricsText(t, url)
	require.Equal(t, value(reloaded, split)+1, value(last, split), "only Qwertzuio was new")
}
