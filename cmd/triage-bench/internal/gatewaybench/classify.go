package gatewaybench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/triage-gw/triage/bench/load"
	"github.com/triage-gw/triage/bench/promtext"
	"github.com/triage-gw/triage/server"
)

// classifyAnswer is the part of a /v1/classify answer the scenarios read.
type classifyAnswer struct {
	Results []struct {
		Cache  string `json:"cache"`
		Tokens int    `json:"tokens"`
		Reason string `json:"reason"`
	} `json:"results"`
}

// classifyTally sums up /v1/classify samples whose bodies were kept.
type classifyTally struct {
	OK, Hits, Misses, Failed int
	Tokens                   []float64
	RouterMs                 []float64 // x-router-latency, where sent
	Latency                  []time.Duration
}

func tallyClassify(ss []load.Sample) classifyTally {
	var t classifyTally
	for _, s := range ss {
		if !s.OK() {
			t.Failed++
			continue
		}
		t.OK++
		t.Latency = append(t.Latency, s.Latency)
		if v, ok := load.HeaderMillis(s.Header, server.HeaderLatency); ok {
			t.RouterMs = append(t.RouterMs, v)
		}
		var a classifyAnswer
		if err := json.Unmarshal(s.Body, &a); err != nil || len(a.Results) == 0 {
			continue
		}
		for _, r := range a.Results {
			if r.Cache == "hit" {
				t.Hits++
			} else {
				t.Misses++
			}
			t.Tokens = append(t.Tokens, float64(r.Tokens))
		}
	}
	return t
}

// batcherDelta is the gateway's work between two scrapes: the batcher's, the CPU the whole
// process used, and the texts the cascade's first stage and the encoder decided.
type batcherDelta struct {
	Batches      float64 `json:"batches"`
	Texts        float64 `json:"texts"`
	InferenceSec float64 `json:"inference_s"`
	CPUSec       float64 `json:"cpu_s"`
	Static       float64 `json:"static_decided"`
	Encoder      float64 `json:"encoder_decided"`
}

// cpuPer1000 is the gateway's CPU seconds per 1,000 requests.
func (d batcherDelta) cpuPer1000(requests int) float64 {
	if requests <= 0 {
		return math.NaN()
	}
	return 1000 * d.CPUSec / float64(requests)
}

// staticShare is the share of fresh classifications the first stage decided.
func (d batcherDelta) staticShare() float64 {
	if d.Static+d.Encoder <= 0 {
		return math.NaN()
	}
	return d.Static / (d.Static + d.Encoder)
}

func deltaBatcher(a, b promtext.Samples) batcherDelta {
	d := func(name string) float64 { return b.Sum(name) - a.Sum(name) }
	return batcherDelta{
		Batches:      d("triage_batcher_inference_seconds_count"),
		Texts:        d("triage_batcher_batch_size_sum"),
		InferenceSec: d("triage_batcher_inference_seconds_sum"),
		CPUSec:       d("process_cpu_seconds_total"),
		Static:       d(`triage_classifications_total{stage="static"}`),
		Encoder:      d(`triage_classifications_total{stage="encoder"}`),
	}
}

func (d batcherDelta) meanInferenceMs() float64 {
	if d.Batches <= 0 {
		return math.NaN()
	}
	return 1000 * d.InferenceSec / d.Batches
}

func (d batcherDelta) meanBatch() float64 {
	if d.Batches <= 0 {
		return math.NaN()
	}
	return d.Texts / d.Batches
}

// warmClassify classifies texts 0..n-1 of src in /v1/classify batches of
// up to 32, so later requests for them are cache hits.
func warmClassify(ctx context.Context, c *http.Client, url string, src *TextSource, n int) error {
	for i := 0; i < n; i += 32 {
		var items []classifyItem
		for j := i; j < min(i+32, n); j++ {
			items = append(items, src.item(int64(j)))
		}
		body, err := json.Marshal(map[string]any{"texts": items})
		if err != nil {
			return err
		}
		if s := load.PostJSON(ctx, c, url, body, false); !s.OK() {
			return fmt.Errorf("classify batch at %d: %s", i, load.FirstError([]load.Sample{s}))
		}
	}
	return nil
}
