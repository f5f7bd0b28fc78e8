package server

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/router"
)

// loaderSeq hands out the models a test lines up, one per load; an error entry fails that
// load.
type loaderSeq struct {
	mu     sync.Mutex
	models []*fakeModel
	errs   []error
	n      int
}

func (l *loaderSeq) load() (router.Model, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.n
	l.n++
	if i < len(l.errs) && l.errs[i] != nil {
		return nil, l.errs[i]
	}
	return l.models[i], nil
}

func reload(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	return postJSON(t, url+"/admin/reload", "", "Authorization", "Bearer "+testToken)
}

func TestReloadSwapsModelAtomicallyAndClosesTheOldOneAfterItsLastBatch(t *testing.T) {
	v1, v2 := newFakeModel("v1"), newFakeModel("v2")
	started, unblock := make(chan struct{}, 1), make(chan struct{})
	v1.classify = func(ctx context.Context, texts []string) ([]classifier.Result, error) {
		if texts[0] == "hold p=0.2" {
			started <- struct{}{}
			select {
			case <-unblock:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return scoreTexts(texts), nil
	}
	seq := &loaderSeq{models: []*fakeModel{v1, v2}}
	ts := startServer(t, func(c *gatewayConfig, o *testOptions) {
		o.load = seq.load
		c.Batcher.Workers = 2 // a second batch may run while the first is held
	})
	release := sync.OnceFunc(func() { close(unblock) })
	defer release()

	// Warm the cache under v1.
	res := classify(t, ts.url, `{"text":"cached p=0.3"}`)
	require.Equal(t, "v1", res[0].ModelVersion)
	ts.router.WaitCache()
	require.Equal(t, "hit", classify(t, ts.url, `{"text":"cached p=0.3"}`)[0].Cache)

	// A batch is running on v1 when the reload happens.
	inflight := make(chan classifyResult, 1)
	go func() {
		resp, body := postJSON(t, ts.url+"/v1/classify", `{"text":"hold p=0.2"}`)
		var out classifyResponse
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &out) == nil {
			inflight <- out.Results[0]
		}
		close(inflight)
	}()
	<-started

	resp, body := reload(t, ts.url)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.JSONEq(t, `{"previous_version":"v1","model_version":"v2"}`, string(body))
	require.False(t, v1.closed.Load(), "v1 still has a batch running")

	// New work goes to v2, and cache keys follow the version.
	res = classify(t, ts.url, `{"text":"cached p=0.3"}`)
	require.Equal(t, "v2", res[0].ModelVersion)
	require.Equal(t, "miss", res[0].Cache)

	release()
	r := <-inflight
	require.Equal(t, "v1", r.ModelVersion, "the in-flight request finished on the old model")
	eventually(t, v1.closed.Load, "v1 is closed once its last batch released it")
	require.False(t, v2.closed.Load())

	_, metrics := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
	require.Contains(t, string(metrics), `triage_model_info{version="v2"} 1`)
	require.NotContains(t, string(metrics), `triage_model_info{version="v1"}`)
	require.Contains(t, string(metrics), `triage_model_reloads_total{result="ok"} 1`)
}

func TestBrokenModelIsRefusedAndTheOldOneKeepsServing(t *testing.T) {
	nan := newFakeModel("v-nan")
	nan.classify = func(context.Context, []string) ([]classifier.Result, error) {
		return []classifier.Result{{PSlow: float32(math.NaN())}}, nil
	}
	seq := &loaderSeq{
		models: []*fakeModel{newFakeModel("v1"), nil, nan},
		errs:   []error{nil, errors.New("manifest.json: sha256 mismatch")},
	}
	ts := startServer(t, func(_ *gatewayConfig, o *testOptions) { o.load = seq.load })

	resp, body := reload(t, ts.url)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	e := apiErr(t, body)
	require.Equal(t, "model_reload_failed", *e.Code)
	require.Contains(t, e.Message, "sha256 mismatch", "the admin caller learns why")

	resp, body = reload(t, ts.url)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Contains(t, apiErr(t, body).Message, "outside [0, 1]")
	require.True(t, nan.closed.Load(), "a refused model is closed")

	require.Equal(t, "v1", classify(t, ts.url, `{"text":"x"}`)[0].ModelVersion)
	require.False(t, seq.models[0].closed.Load())
	_, metrics := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
	require.Contains(t, string(metrics), `triage_model_reloads_total{result="error"} 2`)
}

func TestStartupRefusesABrokenModel(t *testing.T) {
	fast, slow := newFakeUpstream(t), newFakeUpstream(t)
	cfg := testConfig([]string{fast.srv.URL}, []string{slow.srv.URL})
	m := newFakeModel("v1")
	m.classify = func(context.Context, []string) ([]classifier.Result, error) { return nil, nil }
	_, err := build(cfg, testOptions{load: func() (router.Model, error) { return m, nil }}, nil)
	require.ErrorContains(t, err, "returned 0 results")
	require.True(t, m.closed.Load())

	_, err = build(cfg, testOptions{load: func() (router.Model, error) { return nil, errors.New("no such file") }}, nil)
	require.ErrorContains(t, err, "no such file")
}
