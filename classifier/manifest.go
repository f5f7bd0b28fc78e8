package classifier

import (
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
	Version        string  `json:"version"`
	TextFormat     string  `json:"text_format"`
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
}

// Feature names the Go classifier knows how to compute, in the order the
// head expects them when listed.
const (
	featureMeanPooled = "mean_pooled_l2"
	featureHasContext = "has_context"
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
	return &m, nil
}

func (m *Manifest) validate() error {
	var errs []error
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
	if len(m.Head.Features) == 0 || m.Head.Features[0] != featureMeanPooled {
		errs = append(errs, fmt.Errorf("head.features: must start with %q, got %q", featureMeanPooled, m.Head.Features))
	}
	for _, f := range m.Head.Features {
		if !slices.Contains([]string{featureMeanPooled, featureHasContext}, f) {
			errs = append(errs, fmt.Errorf("head.features: unknown feature %q", f))
		}
	}
	if m.LabelThreshold <= 0 || m.LabelThreshold >= 1 {
		errs = append(errs, fmt.Errorf("label_threshold: must be in (0, 1), got %g", m.LabelThreshold))
	}
	return errors.Join(errs...)
}

// featureDim is the width of the head's input.
func (m *Manifest) featureDim() int {
	n := 0
	for _, f := range m.Head.Features {
		switch f {
		case featureMeanPooled:
			n += m.Encoder.Dim
		case featureHasContext:
			n++
		}
	}
	return n
}
