package upstream

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/upstream/policy"
)

// fakeFleet is a PickPublisher and RemoteLoad with func fields.
type fakeFleet struct {
	mu       sync.Mutex
	picks    []policy.Observation
	pools    []string
	inFlight func(pool string) map[string]int
}

func (f *fakeFleet) PublishPick(pool string, o policy.Observation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pools = append(f.pools, pool)
	f.picks = append(f.picks, o)
}

func (f *fakeFleet) RemoteInFlight(pool string) map[string]int {
	if f.inFlight == nil {
		return nil
	}
	return f.inFlight(pool)
}

func (f *fakeFleet) published() []policy.Observation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]policy.Observation(nil), f.picks...)
}

func okReplica(t *testing.T) string {
	return replicaServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}).URL
}

func fleetPool(t *testing.T, name string, ff *fakeFleet, n int) *Pool {
	t.Helper()
	urls := make([]string, n)
	for i := range urls {
		urls[i] = okReplica(t)
	}
	cfg := testConfig(urls...)
	cfg.Policy.Name = name
	p, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Picks: ff, Remote: ff})
	require.NoError(t, err)
	return p
}

func doOnce(t *testing.T, p *Pool, prompt string) string {
	t.Helper()
	resp, err := p.Do(context.Background(), &ForwardRequest{Method: http.MethodPost, Path: "/v1/completions",
		Body: []byte(`{}`), Routing: policy.Request{Prompt: prompt, InputTokens: len(prompt) / 4, Session: "s"}})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.ReplicaID
}

// The other gateways' in-flight counts are part of each candidate's load: a replica busy
// elsewhere is avoided here, and the admin status shows both counts.
func TestRemoteInFlightIsPartOfTheLoad(t *testing.T) {
	ff := &fakeFleet{inFlight: func(pool string) map[string]int {
		require.Equal(t, "test", pool)
		return map[string]int{"r0": 3, "r2": 1, "gone": 7}
	}}
	p := fleetPool(t, "least-request", ff, 3)
	for range 4 {
		require.Equal(t, "r1", doOnce(t, p, "x"), "r1 is the only replica idle fleet-wide")
	}
	st := p.Replicas()
	require.Equal(t, []int{3, 0, 1}, []int{st[0].RemoteInFlight, st[1].RemoteInFlight, st[2].RemoteInFlight})
	require.Zero(t, st[1].InFlight, "InFlight stays this gateway's own")
	require.Empty(t, ff.published(), "least-request keeps no state to share")
}

// A policy that shares publishes one observation per request charged, naming the replica
// that got it, under the pool's name.
func TestPicksArePublished(t *testing.T) {
	ff := &fakeFleet{}
	p := fleetPool(t, "prefix-cache", ff, 2)
	id := doOnce(t, p, "a prompt long enough for two blocks of 128 characters ..................................................................................................................................")
	obs := ff.published()
	require.Len(t, obs, 1)
	require.Equal(t, id, obs[0].ReplicaID)
	require.Equal(t, 128, obs[0].BlockChars)
	require.Len(t, obs[0].Hashes, 2)
	require.Equal(t, []string{"test"}, ff.pools)
}

// An observed pick steers the next request of the same prompt; a pick naming a replica this
// pool does not have is refused.
func TestObservePick(t *testing.T) {
	a := fleetPool(t, "prefix-cache", &fakeFleet{}, 4)
	b := fleetPool(t, "prefix-cache", &fakeFleet{}, 4)
	prompt := strings.Repeat("system: you are terse. ", 8) + "\nuser: hello there" // one full 128-char block
	hs, ok := a.sharer.Share(&policy.Request{Prompt: prompt}, "r3")
	require.True(t, ok)
	require.True(t, b.ObservePick(hs))
	for range 3 {
		require.Equal(t, "r3", doOnce(t, b, prompt+"\nassistant: hi\nuser: more"))
	}
	hs.ReplicaID = "elsewhere"
	require.False(t, b.ObservePick(hs))
	lr := fleetPool(t, "least-request", &fakeFleet{}, 1)
	require.False(t, lr.ObservePick(policy.Observation{ReplicaID: "r0"}), "least-request learns nothing")
}

func TestInFlightByReplica(t *testing.T) {
	p := fleetPool(t, "least-request", &fakeFleet{}, 2)
	resp, err := p.Do(context.Background(), &ForwardRequest{Path: "/"})
	require.NoError(t, err)
	in := p.InFlightByReplica()
	require.Equal(t, 1, in[resp.ReplicaID])
	require.Len(t, in, 2)
	resp.Body.Close()
	require.Equal(t, map[string]int{"r0": 0, "r1": 0}, p.InFlightByReplica())
}
