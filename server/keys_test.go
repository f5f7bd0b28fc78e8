package server

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream/policy"
)

func TestRoutingKeyBoundsLength(t *testing.T) {
	short := strings.Repeat("u", maxKeyBytes)
	require.Equal(t, short, routingKey(short))
	long := short + "x"
	k := routingKey(long)
	require.LessOrEqual(t, len(k), maxKeyBytes)
	require.Equal(t, k, routingKey(long), "stable: the same long key is the same session")
	require.NotEqual(t, k, routingKey(short+"y"))
}

// Distinct 60 KB user values (and 10 KB session ids) held by a session-affinity policy used
// to grow the heap by their full size (150 of each: ~10 MB); kept as bounded keys they cost a
// few KB.
func TestLongUserKeysDoNotGrowTheHeap(t *testing.T) {
	// Simulated replicas: they keep nothing of a request (the recording fake would).
	cfg := testConfig([]string{simUpstream(t, "f0", "m"), simUpstream(t, "f1", "m")}, []string{simUpstream(t, "s0", "m")})
	cfg.Pools.Fast.Policy.Name = "lmetric"
	lm := policy.SectionOf[policy.LMetricConfig](cfg.Pools.Fast.Policy, "lmetric")
	lm.Variant = policy.LMetricSticky
	require.NoError(t, cfg.Pools.Fast.Policy.SetSection("lmetric", lm))
	cfg.Cache.Enabled = false
	_, url, _ := run(t, cfg, testOptions{load: func() (router.Model, error) { return newFakeModel("v1"), nil }})
	ts := struct{ url string }{url}
	send := func(i int) {
		user := fmt.Sprintf("%06d", i) + strings.Repeat("u", 60_000)
		body := fmt.Sprintf(`{"user":%q,"max_tokens":1,"messages":[{"role":"user","content":"hi p=0.1 %d"}]}`, user, i)
		resp, b := postJSON(t, ts.url+"/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b[:min(len(b), 200)]))
		// Headers are capped at 16 KiB; a 10 KB session id is the most a client can send.
		resp, b = postJSON(t, ts.url+"/v1/chat/completions", body, "X-Session-Id", user[:10_000])
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b[:min(len(b), 200)]))
	}
	for i := range 20 { // warm up pools, buffers and caches
		send(i)
	}
	before := heapInUse()
	for i := range 150 {
		send(1000 + i)
	}
	grown := heapInUse() - before
	t.Logf("heap grew %.1f MB over 150 requests with 60 KB keys", float64(grown)/(1<<20))
	require.Less(t, grown, int64(3<<20), "keys kept by the policies must be bounded in bytes")
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
