package classifier

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Manifest describes one exported model: the encoder it expects, the head,
// and the input format. The training notebook writes it next to the head.
type Manifest struct {
	// FormatVersion is the manifest format: absent (0) or 1 is the first
	// format, 2 adds the static stage's piece weights. A newer format than
	// this build reads is refused, naming both.
	FormatVersion int    `json:"format_version"`
	Version       string `json:"version"`
	TextFormat    string `json:"text_format"`
	// TextFilter names the noise filter the heads were trained behind: NoiseFilter,
	// NoiseFilterV1 (exported before the trailer rule), or empty for a model exported
	// before the filter (it still loads, and gets its input unfiltered). Another name is
	// refused (TextFilter).
	TextFilter     string  `json:"text_filter"`
	LabelThreshold float64 `json:"label_threshold"`
	Encoder        struct {
		Name            string `json:"name"`
		File            string `json:"file"`
		SHA256          string `json:"sha256"`
		TokenizerFile   string `json:"tokenizer_file"`
		TokenizerSHA256 string `json:"tokenizer_sha256"`
		Output          string `json:"output"`
		Dim             int    `json:"dim"`
		MaxTokens       int    `json:"max_tokens"`
		Truncation      string `json:"truncation"`
		Pooling         string `json:"pooling"`
		Normalize       string `json:"normalize"`
	} `json:"encoder"`
	Head struct {
		File     string   `json:"file"`
		SHA256   string   `json:"sha256"`
		Input    string   `json:"input"`
		Output   string   `json:"output"`
		Features []string `json:"features"`
	} `json:"head"`
	// Static is the optional first stage; nil when the manifest has none
	// (the int8 variant), and then the model has no static stage.
	Static *StaticManifest `json:"static,omitempty"`

	sha256 string // of manifest.json as read, for the content version
}

// StaticManifest describes the static first stage: a table of one vector
// per word piece distilled from the encoder, its logistic-regression head
// (JSON: float32 weights in feature order and a bias), and the band of
// P(slow) inside which it defers to the encoder.
type StaticManifest struct {
	TableFile   string   `json:"table_file"`
	TableSHA256 string   `json:"table_sha256"`
	TableFormat string   `json:"table_format"` // int8_row_scale, float16 or float32
	Vocab       int      `json:"vocab"`
	Dim         int      `json:"dim"`
	DropIDs     []uint32 `json:"drop_ids"` // token ids left out of the mean: [CLS], [SEP]
	// Pooling is "mean" (every kept piece counts once) or, from format 2,
	// "weighted_mean": each piece's row counts by its weight in WeightsFile
	// (vocab little-endian float32 values, one per piece), so pieces that
	// carry nothing for the decision (digits, hex fragments, punctuation)
	// do not dilute the text's vector.
	Pooling       string   `json:"pooling"`
	WeightsFile   string   `json:"weights_file,omitempty"`
	WeightsSHA256 string   `json:"weights_sha256,omitempty"`
	Normalize     string   `json:"normalize"`
	HeadFile      string   `json:"head_file"`
	HeadSHA256    string   `json:"head_sha256"`
	Features      []string `json:"features"`
	// InBandHeadFile (format 3, optional) is a second logistic head, same JSON
	// form, for the texts inside the band that load or a failed encoder leaves
	// to the first stage after all: it reads the static vector, the same pooling
	// over the text's first k kept pieces ("first<k>_mean_l2") and has_context.
	// Without it such texts are decided on the head above.
	InBandHeadFile   string   `json:"in_band_head_file,omitempty"`
	InBandHeadSHA256 string   `json:"in_band_head_sha256,omitempty"`
	InBandFeatures   []string `json:"in_band_features,omitempty"`
	// LongHeadFile (format 4, optional) is a third logistic head, same JSON form and the
	// static head's features (LongFeatures), for long texts without a context: a text with no
	// instruction/context separator and more than LongAfter kept pieces (pieces the static
	// vector reads) is scored on it (inside the band the in-band head still decides, when
	// the first stage must). The head above learnt long text only as contexts, behind
	// has_context, and is unsure of a long prompt without one.
	LongHeadFile   string   `json:"long_head_file,omitempty"`
	LongHeadSHA256 string   `json:"long_head_sha256,omitempty"`
	LongFeatures   []string `json:"long_features,omitempty"`
	LongAfter      int      `json:"long_after,omitempty"`
	// LongTableFile (format 5, optional, with a long head) is the long head's own table, in
	// TableFormat, Vocab×Dim: each piece's vector is the mean of the encoder's output vectors
	// for it where it occurs in the training text, shrunk toward the static table's vector
	// (the encoder's vector of a long text is the mean of its tokens in context, which the
	// static table's pieces alone miss). With it LongFeatures starts with
	// "long_table_mean_l2": the static vector's pooling over this table.
	LongTableFile   string `json:"long_table_file,omitempty"`
	LongTableSHA256 string `json:"long_table_sha256,omitempty"`
	// FirstSentence (format 6, optional, with a long head) says where a text's first
	// sentence ends, in token ids; with it LongFeatures has "first_sentence_mean_l2" after its
	// vector: the static vector (static table, piece weights) of the text's pieces up to that
	// end. A long prompt's label is mostly its request's, and the request is mostly its first
	// sentence, which a mean over the whole text drowns.
	FirstSentence *FirstSentence `json:"first_sentence,omitempty"`
	// Band is [lo, hi], for every head of the first stage (the notebook's band rule is run
	// on the first stage with its long head).
	Band []float64 `json:"band"`
	// DistilledFrom names the encoder the table was distilled from; it must be
	// the manifest's encoder (a table from another encoder is refused).
	DistilledFrom struct {
		EncoderSHA256 string `json:"encoder_sha256"`
	} `json:"distilled_from"`
}

// FirstSentence is the rule for a text's first sentence, on its token ids ([CLS] first):
// it ends at the first piece in EndIDs, at most MaxPieces pieces after [CLS], whose
// previous piece is not in NotAfterIDs (an abbreviation, an initial: "Dr.", "U.S.") and
// whose next piece is not in NotBeforeIDs (a digit piece or "/": "3.5", "10:30",
// "https://"). A text with no such end, or whose end is its last piece, is its own first
// sentence. The notebook's first_sentence is the same rule.
type FirstSentence struct {
	EndIDs       []uint32 `json:"end_ids"`
	NotAfterIDs  []uint32 `json:"not_after_ids"`
	NotBeforeIDs []uint32 `json:"not_before_ids"`
	MaxPieces    int      `json:"max_pieces"`
}

// Feature names a head may list (manifest head.features, static.features),
// in the order it expects them.
const (
	// FeatureMeanPooled is the encoder's output, mean-pooled over the
	// attention mask and L2-normalised: encoder.dim values.
	FeatureMeanPooled = "mean_pooled_l2"
	// FeatureHasContext is one value, HasContext of the text's ids.
	FeatureHasContext = "has_context"
)

// LoadManifest reads and checks dir/manifest.json.
func LoadManifest(dir string) (*Manifest, error) {
	path := filepath.Join(dir, "manifest.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: invalid JSON: %w", path, err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	m.sha256 = sha256Hex(raw)
	return &m, nil
}

// Manifest formats this build reads (Manifest.FormatVersion).
const (
	formatV1 = 1 // the first format; also an absent format_version
	formatV2 = 2 // static.pooling "weighted_mean" with static.weights_file
	formatV3 = 3 // static.in_band_head_file: the first stage's head for the texts inside its band
	formatV4 = 4 // static.long_head_file: the first stage's head for long texts without a context
	formatV5 = 5 // static.long_table_file: the long head's own table, of pieces in context
	formatV6 = 6 // static.first_sentence: the long head reads a text's first sentence beside the whole
	// FormatLatest is the newest manifest format this build reads and the one the notebook writes.
	FormatLatest = formatV6
)

func (m *Manifest) validate() error {
	var errs []error
	if m.FormatVersion < 0 || m.FormatVersion > FormatLatest {
		// Nothing else is checked: a newer format may mean anything by its fields.
		return fmt.Errorf("format_version %d: this build of Triage reads manifest formats 1 to %d; use a newer Triage or re-export the model with this one's notebook", m.FormatVersion, FormatLatest)
	}
	if _, err := TextFilter(m.TextFilter); err != nil {
		errs = append(errs, fmt.Errorf("text_filter: %w", err))
	}
	if m.Version == "" {
		errs = append(errs, errors.New("version: must not be empty"))
	}
	if m.Encoder.File == "" || m.Encoder.TokenizerFile == "" {
		errs = append(errs, errors.New("encoder.file and encoder.tokenizer_file: must not be empty"))
	}
	if m.Encoder.Dim < 1 {
		errs = append(errs, fmt.Errorf("encoder.dim: must be >= 1, got %d", m.Encoder.Dim))
	}
	if m.Encoder.MaxTokens < 2 {
		errs = append(errs, fmt.Errorf("encoder.max_tokens: must be >= 2, got %d", m.Encoder.MaxTokens))
	}
	if m.Encoder.Truncation != "right" {
		errs = append(errs, fmt.Errorf("encoder.truncation: only \"right\" is supported, got %q", m.Encoder.Truncation))
	}
	if m.Encoder.Pooling != "mean" {
		errs = append(errs, fmt.Errorf("encoder.pooling: only \"mean\" is supported, got %q", m.Encoder.Pooling))
	}
	if m.Encoder.Normalize != "l2" {
		errs = append(errs, fmt.Errorf("encoder.normalize: only \"l2\" is supported, got %q", m.Encoder.Normalize))
	}
	if m.Head.File == "" || m.Head.Input == "" || m.Head.Output == "" {
		errs = append(errs, errors.New("head.file, head.input and head.output: must not be empty"))
	}
	if len(m.Head.Features) == 0 || m.Head.Features[0] != FeatureMeanPooled {
		errs = append(errs, fmt.Errorf("head.features: must start with %q, got %q", FeatureMeanPooled, m.Head.Features))
	}
	for _, f := range m.Head.Features {
		if !slices.Contains([]string{FeatureMeanPooled, FeatureHasContext}, f) {
			errs = append(errs, fmt.Errorf("head.features: unknown feature %q", f))
		}
	}
	if m.LabelThreshold <= 0 || m.LabelThreshold >= 1 {
		errs = append(errs, fmt.Errorf("label_threshold: must be in (0, 1), got %g", m.LabelThreshold))
	}
	if m.Static != nil {
		errs = append(errs, m.Static.validate(max(m.FormatVersion, formatV1)))
		if got := m.Static.DistilledFrom.EncoderSHA256; got != m.Encoder.SHA256 {
			errs = append(errs, fmt.Errorf("static.distilled_from.encoder_sha256: the table was distilled from encoder %q, not this manifest's encoder %q; re-run the notebook", got, m.Encoder.SHA256))
		}
	}
	return errors.Join(errs...)
}

// FeatureDim is the width of the head's input: encoder.dim for
// FeatureMeanPooled, one for FeatureHasContext.
func (m *Manifest) FeatureDim() int {
	n := 0
	for _, f := range m.Head.Features {
		switch f {
		case FeatureMeanPooled:
			n += m.Encoder.Dim
		case FeatureHasContext:
			n++
		}
	}
	return n
}

// ContentVersion derives the model version that keys cached results from
// what is loaded: the manifest's bytes as LoadManifest read them and the
// sha256 of every artifact as read, in the order given (a model passes
// tokenizer, encoder, head, then LoadStatic's table and head). The
// manifest's own version stays in front, readable; the suffix changes
// whenever any byte of the model does, even under the same version string.
func (m *Manifest) ContentVersion(artifactSHA256s []string) string {
	h := sha256.New()
	fmt.Fprintf(h, "manifest %s\n", m.sha256)
	for _, s := range artifactSHA256s {
		fmt.Fprintf(h, "artifact %s\n", s)
	}
	return m.Version + "+" + hex.EncodeToString(h.Sum(nil))[:12]
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
