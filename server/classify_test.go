package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

func classify(t *testing.T, url, body string) []classifyResult {
	t.Helper()
	resp, b := postJSON(t, url+"/v1/classify", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var out classifyResponse
	require.NoError(t, json.Unmarshal(b, &out))
	return out.Results
}

func TestClassifyReportsEveryTextWithoutExecuting(t *testing.T) {
	ts := startServer(t)
	res := classify(t, ts.url, `{"texts": ["plain p=0.2", {"text": "story p=0.87", "context": "about  cats"}, {"text": "p=0.3"}]}`)
	require.Len(t, res, 3)

	require.Equal(t, classifyResult{PSlow: 0.2, ModelLabel: 0, Label: 0, Path: "fast", Reason: "fast_model",
		Threshold: 0.5, ThresholdParts: thresholdParts{Load: 0.5}, Load: 0, Cache: "miss", Tokens: 4, ModelVersion: "v1", Stage: "encoder"}, res[0])
	require.Equal(t, 0.87, res[1].PSlow)
	require.Equal(t, 1, res[1].ModelLabel)
	require.Equal(t, 1, res[1].Label)
	require.Equal(t, "slow_granted", res[1].Reason)
	require.Equal(t, "fast", res[2].Path)
	require.Contains(t, ts.model.seen(), "story p=0.87 [SEP] about cats")

	require.Empty(t, ts.fast.requests(), "classify executes nothing")
	require.Empty(t, ts.slow.requests())
	require.Equal(t, 0, ts.router.State().SlowActive, "classify never takes a slow slot")

	ts.router.WaitCache()
	resp, b := postJSON(t, ts.url+"/v1/classify", `{"text": "story p=0.87", "context": "about cats"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	lat, err := strconv.ParseFloat(resp.Header.Get(HeaderLatency), 64)
	require.NoError(t, err, "x-router-latency is a decimal number of milliseconds")
	require.GreaterOrEqual(t, lat, 0.0)
	require.Contains(t, resp.Header.Get("Server-Timing"), `cache;desc="hit"`)
	var one classifyResponse
	require.NoError(t, json.Unmarshal(b, &one))
	res = one.Results
	require.Len(t, res, 1)
	require.Equal(t, "hit", res[0].Cache)
	require.Equal(t, "slow_granted", res[0].Reason)
}

func TestClassifyTextsShareBatches(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Cache.Enabled = false })
	// Hold the first batch so the request's other texts queue behind it; with
	// an instant model, whether they overlap would depend on scheduling.
	release := make(chan struct{})
	var firstSize atomic.Int64
	ts.model.classify = func(_ context.Context, texts []string) ([]classifier.Result, error) {
		if firstSize.CompareAndSwap(0, int64(len(texts))) {
			<-release
		}
		return scoreTexts(texts), nil
	}
	before := ts.model.calls.Load()
	texts := make([]string, 20)
	for i := range texts {
		texts[i] = `"text ` + strings.Repeat("x", i+1) + `"`
	}
	done := make(chan []classifyResult, 1)
	go func() {
		resp, b, err := tryPostJSON(ts.url+"/v1/classify", `{"texts":[`+strings.Join(texts, ",")+`]}`)
		var out classifyResponse
		if err == nil && resp.StatusCode == http.StatusOK && json.Unmarshal(b, &out) == nil {
			done <- out.Results
			return
		}
		done <- nil
	}()
	eventually(t, func() bool {
		n := firstSize.Load()
		return n > 0 && int(n)+ts.router.State().QueueLen == len(texts)
	}, "the other texts queue while the first batch runs")
	close(release)
	res := <-done
	require.Len(t, res, 20)
	// One call for the first batch, one for everything that queued behind it (or a single call
	// when all 20 arrived before the first batch formed).
	want := int64(2)
	if firstSize.Load() == int64(len(texts)) {
		want = 1
	}
	require.Equal(t, want, ts.model.calls.Load()-before, "queued texts of one request form one batch")
}

func TestClassifyModelErrorIs500AndLoggedNotLeaked(t *testing.T) {
	ts := startServer(t)
	ts.model.classify = func(context.Context, []string) ([]classifier.Result, error) {
		return nil, errors.New("onnx exploded")
	}
	resp, body := postJSON(t, ts.url+"/v1/classify", `{"text":"x"}`)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	e := apiErr(t, body)
	require.NotContains(t, e.Message, "onnx", "internal details are logged, not sent")
}

func TestOneUnreadableTextFailsOnlyItsOwnRequest(t *testing.T) {
	ts := startServer(t)
	ts.model.classify = func(_ context.Context, texts []string) ([]classifier.Result, error) {
		for i, s := range texts {
			if strings.Contains(s, "poison") {
				return nil, &classifier.TextError{Index: i, Err: classifier.ErrEmptyText}
			}
		}
		return scoreTexts(texts), nil
	}
	// Submitted together, the three texts share a batch; only the poisoned one fails.
	res := classify(t, ts.url, `{"texts":["fine p=0.9","also fine"]}`)
	require.InDelta(t, 0.9, res[0].PSlow, 1e-6)
	resp, body := postJSON(t, ts.url+"/v1/classify", `{"texts":["fine p=0.9","poison","also fine"]}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))

	resp, body = postJSON(t, ts.url+"/v1/classify", `{"text":"poison"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	require.Equal(t, "unclassifiable_text", *apiErr(t, body).Code)

	resp, body = postJSON(t, ts.url+"/v1/query-process", `{"text":"\u0000 \u0000"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	require.Equal(t, "empty_text", *apiErr(t, body).Code)
}

func TestOutOfRangeProbabilityIsAServerError(t *testing.T) {
	ts := startServer(t)
	ts.model.classify = func(_ context.Context, texts []string) ([]classifier.Result, error) {
		return []classifier.Result{{PSlow: 1.5}}, nil
	}
	resp, body := postJSON(t, ts.url+"/v1/classify", `{"text":"x"}`)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, string(body))
}
