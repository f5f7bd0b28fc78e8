package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Usage is the token count a replica reported for one answer: the "usage"
// object of an OpenAI-style response (the JSON body, or the stream's usage
// chunk when the request asked for stream_options.include_usage).
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// parseUsage reads the top-level "usage" object of one JSON document. full
// is true when it holds both counts, non-negative (a usage object missing one
// is no report to count or price); completion when at least
// completion_tokens is there, which is enough for the picker's output count.
// A document that is not JSON or has no usage, or a null one, has neither.
func parseUsage(doc []byte) (u Usage, full, completion bool) {
	var v struct {
		Usage *struct {
			PromptTokens     *int `json:"prompt_tokens"`
			CompletionTokens *int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(doc, &v) != nil || v.Usage == nil {
		return Usage{}, false, false
	}
	p, c := v.Usage.PromptTokens, v.Usage.CompletionTokens
	if c == nil || *c < 0 {
		return Usage{}, false, false
	}
	u.CompletionTokens = *c
	if p == nil || *p < 0 {
		return u, false, true
	}
	u.PromptTokens = *p
	return u, true, true
}

// IsUsageChunk reports whether data, the payload of one SSE "data:" line, is
// a stream's usage-only chunk: a JSON object whose "choices" is an empty
// array and whose "usage" is an object. OpenAI, vLLM and SGLang send exactly
// one, last before [DONE], when the request set
// stream_options.include_usage; no token chunk has empty choices.
func IsUsageChunk(data []byte) bool {
	if !bytes.Contains(data, []byte(`"usage"`)) {
		return false // the cheap test first: every token chunk passes here
	}
	var v struct {
		Choices *[]json.RawMessage `json:"choices"`
		Usage   json.RawMessage    `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil || v.Choices == nil || len(*v.Choices) != 0 {
		return false
	}
	u := bytes.TrimSpace(v.Usage)
	return len(u) > 0 && u[0] == '{'
}

// Prices are what one pool's tokens cost, per million tokens. The currency is
// the operator's (the same for every pool): the cost counters are in it.
// Both fields are required once the section is present; a pool without the
// section has no cost counters.
type Prices struct {
	// InputPerMillion is the price of one million prompt tokens.
	InputPerMillion *float64 `yaml:"input_per_million" json:"input_per_million"`
	// OutputPerMillion is the price of one million completion tokens.
	OutputPerMillion *float64 `yaml:"output_per_million" json:"output_per_million"`
}

// ValidateAt reports a missing, negative or non-finite price, naming it from
// path ("pools.fast.prices"). A price of 0 is allowed (a model the operator
// does not pay per token for).
func (p *Prices) ValidateAt(path string) error {
	var errs []error
	for _, f := range []struct {
		name string
		v    *float64
	}{{"input_per_million", p.InputPerMillion}, {"output_per_million", p.OutputPerMillion}} {
		switch {
		case f.v == nil:
			errs = append(errs, fmt.Errorf("%s.%s: required when %s is set (give both prices, or remove the section for no cost counters)", path, f.name, path))
		case math.IsNaN(*f.v) || math.IsInf(*f.v, 0) || *f.v < 0:
			errs = append(errs, fmt.Errorf("%s.%s: must be a finite number >= 0, got %v", path, f.name, *f.v))
		}
	}
	return errors.Join(errs...)
}

// Cost is what u costs at p; p must be valid.
func (p *Prices) Cost(u Usage) float64 {
	return (float64(u.PromptTokens)**p.InputPerMillion + float64(u.CompletionTokens)**p.OutputPerMillion) / 1e6
}
