package onnx

import (
	"context"
	"slices"

	"github.com/triage-gw/triage/classifier"
)

// Tokenize validates and tokenizes one text (already in the model's input
// format, see classifier.FormatInput) exactly as Classify does: invalid UTF-8 gives
// ErrInvalidUTF8, an empty or blank text ErrEmptyText, a closed classifier
// ErrClosed. The result feeds StaticScore and ClassifyTokens of this
// classifier or of any other with the same tokenizer and truncation (a
// reload that changes only the heads keeps them valid).
func (c *Classifier) Tokenize(text string) (classifier.Tokens, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return classifier.Tokens{}, classifier.ErrClosed
	}
	ids, err := c.encode(text)
	if err != nil {
		return classifier.Tokens{}, err
	}
	return classifier.NewTokens(ids, c.tokID), nil
}

// Band returns the manifest's band for the static stage and true, or false
// when the model has no static stage. A text whose StaticScore is decided by
// the band (Band.Decides) needs no encoder; the others go to ClassifyTokens.
func (c *Classifier) Band() (classifier.Band, bool) {
	if c.static == nil {
		return classifier.Band{}, false
	}
	return c.static.Band(), true
}

// StaticScore is the static first stage for one text: the mean of its word
// pieces' rows in the static table ([CLS] and [SEP] left out), L2-normalised,
// then the static head (with has_context); a long text without a context goes
// to the long head when the model has one (classifier.Static.Score). It takes
// microseconds, runs no ONNX Runtime call and does not allocate beyond two
// dim-sized scratch vectors. The Result has Stage StageStatic and the same Tokens count as the
// encoder would report. Errors: ErrNoStatic, ErrForeignTokens (also for a
// zero Tokens), ErrClosed.
func (c *Classifier) StaticScore(t classifier.Tokens) (classifier.Result, error) {
	return c.staticResult(t, (*classifier.Static).Score)
}

// InBandScore is StaticScore on the model's in-band head (its manifest's
// static.in_band_head_file): P(slow) for a text inside the band that the first
// stage decides after all, because the encoder's queue narrowed the band or the
// encoder failed. A model without an in-band head answers as StaticScore does.
// Same errors as StaticScore.
func (c *Classifier) InBandScore(t classifier.Tokens) (classifier.Result, error) {
	return c.staticResult(t, (*classifier.Static).ScoreInBand)
}

// staticResult scores t with one of the static stage's heads (score) as a Result.
func (c *Classifier) staticResult(t classifier.Tokens, score func(*classifier.Static, []uint32, uint32) (float32, error)) (classifier.Result, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return classifier.Result{}, classifier.ErrClosed
	}
	if c.static == nil {
		return classifier.Result{}, classifier.ErrNoStatic
	}
	ids, ok := t.IDsFor(c.tokID)
	if !ok {
		return classifier.Result{}, classifier.ErrForeignTokens
	}
	p, err := score(c.static, ids, c.sepID)
	if err != nil {
		return classifier.Result{}, err
	}
	r := classifier.Result{PSlow: p, Tokens: len(ids), Stage: classifier.StageStatic}
	if float64(p) > c.manifest.LabelThreshold {
		r.Label = classifier.SlowLabel
	}
	return r, nil
}

// ClassifyTokens is Classify for texts already tokenized by Tokenize: the
// same length grouping, encoder calls and head, the same results (Stage
// StageEncoder), without tokenizing again. A Tokens value from a
// classifier with another tokenizer is refused with a *TextError wrapping
// ErrForeignTokens naming its index.
func (c *Classifier) ClassifyTokens(ctx context.Context, toks []classifier.Tokens) ([]classifier.Result, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, classifier.ErrClosed
	}
	if len(toks) == 0 {
		return nil, nil
	}
	ids := make([][]uint32, len(toks))
	for i, t := range toks {
		var ok bool
		if ids[i], ok = t.IDsFor(c.tokID); !ok {
			return nil, &classifier.TextError{Index: i, Err: classifier.ErrForeignTokens}
		}
	}
	return c.classifyIDs(ctx, slices.Clip(ids))
}

// TextFilter names the noise filter the model's heads were trained behind (its manifest's
// text_filter; empty for a model exported before the filter), for the router's Filtered.
func (c *Classifier) TextFilter() string { return c.manifest.TextFilter }
