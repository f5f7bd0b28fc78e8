package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/classifier"
)

// realModelServer runs the gateway with the real classifier (models/ and
// .deps/ from scripts/setup.sh) over two sim replicas per pool.
func realModelServer(t *testing.T) string {
	t.Helper()
	cfg := testConfig(
		[]string{simUpstream(t, "fast-0", "m-fast"), simUpstream(t, "fast-1", "m-fast")},
		[]string{simUpstream(t, "slow-0", "m-slow"), simUpstream(t, "slow-1", "m-slow")})
	cc := classifier.DefaultConfig()
	cc.ModelDir = filepath.Join("..", cc.ModelDir)
	cc.EncoderDir = filepath.Join("..", cc.EncoderDir)
	cc.ORTLibrary = filepath.Join("..", cc.ORTLibrary)
	cfg.Classifier = cc
	// This test checks values, not overload: 50-text requests on a busy CI machine could
	// exceed the expected-wait bound and get 429.
	cfg.Batcher.MaxQueueDelay = 0
	load := func() (Model, error) { return classifier.New(cc) }
	_, url, _ := run(t, cfg, Options{Load: load})
	return url
}

type parityRow struct {
	Category    string  `json:"category"`
	Instruction string  `json:"instruction"`
	Context     string  `json:"context"`
	PSlow       float64 `json:"p_slow"`
}

// TestRealModelEndToEnd sends Dolly parity texts through real HTTP to the
// real classifier: every P(slow) the gateway reports matches the notebook's
// to 1e-4, and /v1/query-process routes a story to the slow pool and a
// summarisation with its document to the fast one.
func TestRealModelEndToEnd(t *testing.T) {
	url := realModelServer(t)

	f, err := os.Open(filepath.Join("..", "models", "parity.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	var rows []parityRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r parityRow
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		// Texts the gateway rejects by size (64 KiB default) or changes by
		// whitespace normalisation are covered by the classifier's own test.
		if r.Category == "edge" || len(r.Instruction)+len(r.Context) > 60000 ||
			strings.Join(strings.Fields(r.Instruction), " ") != strings.TrimSpace(r.Instruction) ||
			strings.Join(strings.Fields(r.Context), " ") != strings.TrimSpace(r.Context) {
			continue
		}
		rows = append(rows, r)
	}
	require.GreaterOrEqual(t, len(rows), 100)

	for lo := 0; lo < len(rows); lo += 50 {
		hi := min(lo+50, len(rows))
		items := make([]map[string]string, 0, hi-lo)
		for _, r := range rows[lo:hi] {
			items = append(items, map[string]string{"text": r.Instruction, "context": r.Context})
		}
		body, _ := json.Marshal(map[string]any{"texts": items})
		res := classify(t, url, string(body))
		require.Len(t, res, hi-lo)
		for i, got := range res {
			want := rows[lo+i]
			require.LessOrEqualf(t, math.Abs(got.PSlow-want.PSlow), 1e-4+5e-7, // the API rounds to 6 decimals
				"row %d (%s): gateway %.6f, notebook %.6f", lo+i, want.Category, got.PSlow, want.PSlow)
		}
	}

	for _, tc := range []struct {
		body, label, path string
	}{
		{`{"text":"Write a short story about a dragon who learns to bake bread."}`, "1", "slow"},
		{`{"text":"Summarize this passage in two sentences.","context":"The Nile is a major north-flowing river in northeastern Africa. It flows into the Mediterranean Sea."}`, "0", "fast"},
	} {
		resp, b := postJSON(t, url+"/v1/query-process", tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.JSONEq(t, fmt.Sprintf(`{"label":%q}`, tc.label), string(b))
		require.Equal(t, tc.path, resp.Header.Get("x-router-path"))
		require.NotEmpty(t, resp.Header.Get("x-router-latency"))
		require.True(t, strings.HasPrefix(resp.Header.Get("x-router-replica"), tc.path+"-"))
	}
}
