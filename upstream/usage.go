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
// chunk when the request asked for stream_options.include_usage), of an
// Anthropic Messages answer, or of an OpenAI Responses answer (see
// parseUsage for how their fields map).
type Usage struct {
	PromptTokens     int
	CompletionTokens int
}

// usageJSON holds the fields of every usage shape the gateway passes on.
type usageJSON struct {
	PromptTokens     *int `json:"prompt_tokens"`
	CompletionTokens *int `json:"completion_tokens"`
	InputTokens      *int `json:"input_tokens"`
	OutputTokens     *int `json:"output_tokens"`
	CacheRead        *int `json:"cache_read_input_tokens"`
	CacheCreation    *int `json:"cache_creation_input_tokens"`
}

// parseUsage reads the usage object of one JSON document: its top-level
// "usage", else that of its "message" (Anthropic's message_start event) or
// its "response" (the Responses API's response.completed event). full is true
// when it holds both counts, non-negative (a usage object missing one is no
// report to count or price); completion when at least the output count is
// there, which is enough for the picker's output count. A document that is
// not JSON or has no usage, or a null one, has neither.
//
// Chat and completions report prompt_tokens and completion_tokens. Anthropic
// reports input_tokens, output_tokens and, apart from input_tokens, the
// prompt tokens read from and written to its cache: PromptTokens is their sum,
// every prompt token, as chat's prompt_tokens counts cached ones too. The
// Responses API reports input_tokens (cached ones included) and
// output_tokens.
func parseUsage(doc []byte) (u Usage, full, completion bool) {
	switch vals, st := scanUsage(doc); st {
	case scanRead:
		return vals.usage()
	case scanNone:
		return Usage{}, false, false
	}
	return parseUsageJSON(doc)
}

// parseUsageJSON is parseUsage with encoding/json: the reference the fast read is held to,
// and its fallback for names only encoding/json's rules match (usagescan.go).
func parseUsageJSON(doc []byte) (u Usage, full, completion bool) {
	type nested struct {
		Usage *usageJSON `json:"usage"`
	}
	var v struct {
		Usage    *usageJSON `json:"usage"`
		Message  *nested    `json:"message"`
		Response *nested    `json:"response"`
	}
	if json.Unmarshal(doc, &v) != nil {
		return Usage{}, false, false
	}
	uj := v.Usage
	switch {
	case uj != nil:
	case v.Message != nil && v.Message.Usage != nil:
		uj = v.Message.Usage
	case v.Response != nil && v.Response.Usage != nil:
		uj = v.Response.Usage
	default:
		return Usage{}, false, false
	}
	return uj.usage()
}

// usage maps the fields given to a Usage (see parseUsage).
func (uj *usageJSON) usage() (u Usage, full, completion bool) {
	p, c := uj.PromptTokens, uj.CompletionTokens
	if c == nil {
		c = uj.OutputTokens
	}
	if p == nil && uj.InputTokens != nil {
		sum := *uj.InputTokens
		for _, extra := range []*int{uj.CacheRead, uj.CacheCreation} {
			if extra != nil && *extra > 0 {
				sum += *extra
			}
		}
		p = &sum
	}
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
	if is, fallBack := scanUsageChunk(data); !fallBack {
		return is
	}
	return isUsageChunkJSON(data)
}

// isUsageChunkJSON is IsUsageChunk's read with encoding/json (see parseUsageJSON).
func isUsageChunkJSON(data []byte) bool {
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
