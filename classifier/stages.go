package classifier

import (
	"context"
	"slices"
)

// Tokens is one text tokenized for both stages: the word-piece ids the
// encoder sees (truncated to the manifest's max_tokens, [CLS] first, [SEP]
// last). Make it with Tokenize; the zero value is refused by both stages.
// It is immutable and may cross goroutines.
type Tokens struct {
	ids   []uint32
	tokID string // tokenizer sha256 and truncation of the classifier that made it
}

// Len is the number of word pieces, [CLS] and [SEP] included (the encoder's
// cost is about linear in it).
func (t Tokens) Len() int { return len(t.ids) }

// Tokenize validates and tokenizes one text (already in the model's input
// format, see FormatInput) exactly as Classify does: invalid UTF-8 gives
// ErrInvalidUTF8, an empty or blank text ErrEmptyText, a closed classifier
// ErrClosed. The result feeds StaticScore and ClassifyTokens of this
// classifier or of any other with the same tokenizer and truncation (a
// reload that changes only the heads keeps them valid).
func (c *Classifier) Tokenize(text string) (Tokens, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return Tokens{}, ErrClosed
	}
	ids, err := c.encode(text)
	if err != nil {
		return Tokens{}, err
	}
	return Tokens{ids: ids, tokID: c.tokID}, nil
}

// Band returns the manifest's band for the static stage and true, or false
// when the model has no static stage. A text whose StaticScore is decided by
// the band (Band.Decides) needs no encoder; the others go to ClassifyTokens.
func (c *Classifier) Band() (Band, bool) {
	if c.static == nil {
		return Band{}, false
	}
	return c.static.band, true
}

// StaticScore is the static first stage for one text: the mean of its word
// pieces' rows in the static table ([CLS] and [SEP] left out), L2-normalised,
// then the static head (with has_context). It takes microseconds, runs no
// ONNX Runtime call and does not allocate beyond one dim-sized scratch
// vector. The Result has Stage StageStatic and the same Tokens count as the
// encoder would report. Errors: ErrNoStatic, ErrForeignTokens (also for a
// zero Tokens), ErrClosed.
func (c *Classifier) StaticScore(t Tokens) (Result, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return Result{}, ErrClosed
	}
	if c.static == nil {
		return Result{}, ErrNoStatic
	}
	if t.tokID != c.tokID || len(t.ids) == 0 {
		return Result{}, ErrForeignTokens
	}
	acc := make([]float32, c.static.dim)
	p, err := c.static.score(t.ids, c.sepID, acc)
	if err != nil {
		return Result{}, err
	}
	r := Result{PSlow: p, Tokens: len(t.ids), Stage: StageStatic}
	if float64(p) > c.manifest.LabelThreshold {
		r.Label = SlowLabel
	}
	return r, nil
}

// ClassifyTokens is Classify for texts already tokenized by Tokenize: the
// same length grouping, encoder calls and head, the same results (Stage
// StageEncoder), without tokenizing again. A Tokens value from a
// classifier with another tokenizer is refused with a *TextError wrapping
// ErrForeignTokens naming its index.
func (c *Classifier) ClassifyTokens(ctx context.Context, toks []Tokens) ([]Result, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, ErrClosed
	}
	if len(toks) == 0 {
		return nil, nil
	}
	ids := make([][]uint32, len(toks))
	for i, t := range toks {
		if t.tokID != c.tokID || len(t.ids) == 0 {
			return nil, &TextError{Index: i, Err: ErrForeignTokens}
		}
		ids[i] = t.ids
	}
	return c.classifyIDs(ctx, slices.Clip(ids))
}
