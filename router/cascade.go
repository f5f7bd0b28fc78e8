package router

import (
	"context"
	"errors"
	"fmt"

	"github.com/triage-gw/triage/classifier"
)

// CascadeConfig turns the classifier's first stage on or off and may override its band.
//
// The first stage (a static table distilled from the encoder, with its own head) scores a
// text in microseconds; when its P(slow) is outside the band it decides, and only the texts
// inside the band go on to the batcher and the encoder. Models without a first stage (the
// int8 variant) always use the encoder.
type CascadeConfig struct {
	// Enabled turns the cascade on. Default true. Off, every text goes to the encoder.
	Enabled bool `yaml:"enabled"`
	// BandLow and BandHigh override the model's band (its manifest's, chosen by the
	// notebook's rule): the first stage decides when its P(slow) < BandLow or > BandHigh.
	// Both 0 (the default) keep the model's. A narrower band sends fewer texts to the
	// encoder and trusts the first stage more.
	BandLow  float64 `yaml:"band_low"`
	BandHigh float64 `yaml:"band_high"`
	// NarrowFrom and NarrowTo make the band load-adaptive, on the encoder's queue (texts
	// waiting for a batch): up to NarrowFrom queued texts the band is as configured; from
	// there it narrows linearly toward its centre, which it reaches at NarrowTo queued texts,
	// where the first stage decides every text. A text the first stage decides costs
	// microseconds and is right about as often as the encoder (the static stage alone is
	// within a point of MiniLM on the test split, docs/classifier.md), while a text that
	// waits for a long queue may outlive routing.classify_budget and be routed by the
	// fail-open fallback, which knows nothing about it. Defaults 8 and 64 (at ~11 ms of
	// encoder time per text, about 0.1 s and 0.7 s of queue); NarrowTo 0 turns it off.
	NarrowFrom int `yaml:"narrow_from"`
	NarrowTo   int `yaml:"narrow_to"`
}

// DefaultCascadeConfig returns the cascade on with the model's own band, narrowing from 8
// queued texts to its centre at 64.
func DefaultCascadeConfig() CascadeConfig {
	return CascadeConfig{Enabled: true, NarrowFrom: 8, NarrowTo: 64}
}

// ValidateAt reports an invalid band override or narrowing, named from path ("cascade"),
// every error at once.
func (c CascadeConfig) ValidateAt(path string) error {
	var errs []error
	if (c.BandLow != 0 || c.BandHigh != 0) && !(c.BandLow > 0 && c.BandLow < c.BandHigh && c.BandHigh < 1) {
		errs = append(errs, fmt.Errorf("%s.band_low, %[1]s.band_high: want 0 < band_low < band_high < 1 (or both 0 for the model's band), got %v and %v",
			path, c.BandLow, c.BandHigh))
	}
	if c.NarrowTo != 0 && !(c.NarrowFrom >= 0 && c.NarrowFrom < c.NarrowTo) {
		errs = append(errs, fmt.Errorf("%s.narrow_from, %[1]s.narrow_to: want 0 <= narrow_from < narrow_to (or narrow_to 0: the band does not narrow), got %d and %d",
			path, c.NarrowFrom, c.NarrowTo))
	}
	if c.NarrowTo < 0 {
		errs = append(errs, fmt.Errorf("%s.narrow_to: must be >= 0, got %d", path, c.NarrowTo))
	}
	return errors.Join(errs...)
}

// bandAt is band under a queue of queued texts: as is up to cfg.NarrowFrom, then narrowed
// linearly toward its centre, reached at cfg.NarrowTo (and beyond). With NarrowTo 0 it is
// band.
func (c CascadeConfig) bandAt(band classifier.Band, queued int) classifier.Band {
	if c.NarrowTo == 0 || queued <= c.NarrowFrom {
		return band
	}
	f := min(float64(queued-c.NarrowFrom)/float64(c.NarrowTo-c.NarrowFrom), 1)
	mid := (band.Lo + band.Hi) / 2
	return classifier.Band{Lo: band.Lo + f*(mid-band.Lo), Hi: band.Hi - f*(band.Hi-mid)}
}

// Staged is a Model with a first stage; *onnx.Classifier (package classifier/onnx)
// implements it, checked where cmd/triage wires it in. Tokenize's
// Tokens feed both StaticScore and ClassifyTokens, so a text deferred to the encoder is
// not tokenized twice.
type Staged interface {
	Tokenize(text string) (classifier.Tokens, error)
	StaticScore(t classifier.Tokens) (classifier.Result, error)
	Band() (classifier.Band, bool)
	ClassifyTokens(ctx context.Context, toks []classifier.Tokens) ([]classifier.Result, error)
}

// InBandScorer is a Staged model with a second first-stage head for the texts inside its
// band (*onnx.Classifier, for a manifest with static.in_band_head_file). Such a text is
// decided by the first stage only when the encoder's queue narrows the band or the
// encoder fails; then it is decided on InBandScore's P(slow), which reads more of the text
// than StaticScore's head, rather than on StaticScore's.
type InBandScorer interface {
	InBandScore(t classifier.Tokens) (classifier.Result, error)
}

// Filtered is a Model that names the text filter its heads were trained behind (its
// manifest's text_filter); *onnx.Classifier implements it. For classifier.NoiseFilter (or
// the older NoiseFilterV1) the router drops each text's noise words (classifier.FilterInput)
// with the version named, before its caches, the batcher and both stages see it, so a
// model hears what it was trained on and the same instruction with another ticket number,
// reference tag or URL is one cache entry. A model that is not Filtered, or names no
// filter, gets its texts as Input built them.
type Filtered interface {
	TextFilter() string
}

// stageOf returns m's first stage and the band to use under cfg, or nil when the cascade is
// off or m has none.
func stageOf(m Model, cfg CascadeConfig) (Staged, classifier.Band) {
	s, ok := m.(Staged)
	if !ok || !cfg.Enabled {
		return nil, classifier.Band{}
	}
	band, ok := s.Band()
	if !ok {
		return nil, classifier.Band{}
	}
	if cfg.BandLow != 0 || cfg.BandHigh != 0 {
		band = classifier.Band{Lo: cfg.BandLow, Hi: cfg.BandHigh}
	}
	return s, band
}

// cacheVersion keys the caches: the model's version plus how its outputs were produced
// (encoder only, or the cascade with its band), so turning the cascade off or moving the
// band never serves results made the other way.
func cacheVersion(version string, s Staged, band classifier.Band) string {
	if s == nil {
		return version + "|encoder"
	}
	return fmt.Sprintf("%s|cascade:%g-%g", version, band.Lo, band.Hi)
}

// firstStage tokenizes text and scores it with the first stage. decided reports that band
// (l.band, or l.band narrowed under load) lets the score stand, own that l.band itself does;
// otherwise tok is kept for the encoder. For a text inside l.band, res is the in-band head's
// score when the model has one (InBandScorer): what decides it under load, or if the
// encoder fails. A text the tokenizer refuses is an *UnclassifiableError; any other failure
// sends the text on to the encoder (decided false, tok zero), which reports its own errors.
func firstStage(l *loaded, band classifier.Band, text string) (res classifier.Result, tok classifier.Tokens, decided, own bool, err error) {
	tok, err = l.staged.Tokenize(text)
	if err != nil {
		if errors.Is(err, classifier.ErrEmptyText) || errors.Is(err, classifier.ErrInvalidUTF8) {
			return res, tok, false, false, &UnclassifiableError{Err: err}
		}
		return res, classifier.Tokens{}, false, false, nil
	}
	res, err = l.staged.StaticScore(tok)
	if err != nil {
		return res, tok, false, false, nil
	}
	own, decided = l.band.Decides(res.PSlow), band.Decides(res.PSlow)
	if !own {
		if ib, ok := l.staged.(InBandScorer); ok {
			if r, err := ib.InBandScore(tok); err == nil {
				res = r
			}
		}
	}
	return res, tok, decided, own, nil
}
